"""A board's HBM as the design sees it: pseudo-channels, the AXI ports that reach them, and the
plan that splits the decoder's streams over those ports.

The decoder reads three streams from HBM: the weights (``stream_bytes`` a cycle, all the time a
matrix-vector operator runs), the parameters (beats of ``param_width`` entries of the core's
69-bit ``PARAM_LAYOUT``: a row's, or a norm's gains), and, with the KV cache in memory, the
attention's key and value rows (``kv_rows``: ``head_dim`` bytes a cycle). The key and value rows
share their ports: the attention unit takes a job's key rows in its score pass and its value
rows only in its weighted-sum pass, so a job's requests served in order (keys, then values) at
a row a cycle never hold a pass back (the testbench's
:class:`~heteroreason.sim.verify.tb.hbm_channels.SharedRows`; the RTL's token cycles are the
same as with a set of ports each, ``tests/sim/verify/test_shared_kv_ports.py``). Each stream
is split byte-wise over ports of its own: a beat of ``B`` bytes over ``P`` ports puts at
most ``ceil(B / P)`` bytes on each, and a beat is whole when every port's slice has arrived, so
the stream sustains the rate of its most loaded port.

A port of ``w`` bits at the kernel clock ``f`` carries at most ``w / 8 * f`` bytes a second,
and its pseudo-channel at most its achievable bandwidth (the data sheet's figure times the
efficiency a streaming read measures), shared by the ports bound to it. A port wider than the
memory's native AXI width needs a width converter and a clock crossing into the memory's AXI
clock (:attr:`PortPlan.clock_crossing`); with native ports a 300 MHz kernel reaches only
``256 / 8 * 300e6`` = 9.6 GB/s of a U280 pseudo-channel's 14.375.

:func:`plan_memory` is the one definition of that split: the design search
(:mod:`~heteroreason.model.timing.fpga.platform`) takes the weight stream's sustained beats a
cycle from it, and so does the timing model; the testbench's striped HBM model
(:class:`~heteroreason.sim.verify.tb.hbm_channels.StripedChannel`) splits a stream the same way
(:func:`~heteroreason.rtl.decoder.weight_schedule.slice_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from heteroreason.model import checks
from heteroreason.rtl.decoder.core import PARAM_LAYOUT
from heteroreason.rtl.decoder.weight_schedule import slice_bytes

__all__ = ["HBM_SPECS", "HbmError", "HbmSpec", "MemoryPlan", "PortPlan", "param_beat_bytes",
           "plan_memory", "plan_stream", "roofline_bytes_per_s",
           "weight_ceiling_bytes_per_s"]

# a row's bias, multiplier and shift: the bytes of the core's parameter port
def param_beat_bytes(param_width: int) -> int:
    """Bytes of a parameter beat of ``param_width`` entries of the core's ``PARAM_LAYOUT``."""
    checks.integer("param_width", param_width, low=1, error=HbmError)
    return -(-param_width * PARAM_LAYOUT.size // 8)


class HbmError(ValueError):
    """A memory plan the board cannot provide (the message names the parameter and the
    allowed values)."""


@dataclass(frozen=True)
class HbmSpec:
    """A board's HBM: ``pseudo_channels`` of ``channel_bytes_per_s`` each (theoretical),
    ``efficiency`` of it achievable by a streaming read, reached through ``ports_per_channel``
    AXI ports per pseudo-channel of the widths ``port_bits`` (the first is the native width: a
    wider port crosses into the memory's clock). With ``port_clock_hz`` the ports run in a clock
    domain of their own at that rate (the NoC side of a Versal's HBM master units), whatever the
    kernel's clock: the kernel reaches them through an asynchronous FIFO a port
    (``port_clock_source`` says where the clock and what the crossing costs come from)."""

    name: str
    pseudo_channels: int
    channel_bytes_per_s: float
    efficiency: float
    ports_per_channel: int
    port_bits: tuple[int, ...]
    read_latency_s: float
    capacity_bytes: float
    source: str
    efficiency_source: str
    port_clock_hz: float | None = None
    port_clock_source: str = ""

    def __post_init__(self):
        for key in ("pseudo_channels", "ports_per_channel"):
            value = getattr(self, key)
            checks.integer(f"{self.name}: {key}", value, low=1, error=HbmError)
        if not (self.channel_bytes_per_s > 0 and 0 < self.efficiency <= 1
                and self.read_latency_s >= 0 and self.capacity_bytes > 0):
            raise HbmError(f"{self.name}: channel_bytes_per_s and capacity_bytes must be "
                           f"positive, efficiency in (0, 1], read_latency_s >= 0")
        if self.port_clock_hz is not None and not self.port_clock_hz > 0:
            raise HbmError(f"{self.name}: port_clock_hz must be positive, not "
                           f"{self.port_clock_hz!r}")
        if not self.port_bits or any(isinstance(w, bool) or not isinstance(w, int) or w <= 0
                                     or w % 8 for w in self.port_bits):
            raise HbmError(f"{self.name}: port_bits must be positive multiples of 8, "
                           f"not {self.port_bits!r}")

    @property
    def native_port_bits(self) -> int:
        return self.port_bits[0]

    @property
    def ports(self) -> int:
        return self.pseudo_channels * self.ports_per_channel

    @property
    def peak_bytes_per_s(self) -> float:
        """The data sheet's bandwidth."""
        return self.pseudo_channels * self.channel_bytes_per_s

    @property
    def achievable_bytes_per_s(self) -> float:
        """What a streaming read of every pseudo-channel achieves."""
        return self.peak_bytes_per_s * self.efficiency

    def port_bytes_per_s(self, port_bits: int, clock_hz: float) -> float:
        """What one port sustains: its width at its clock (the kernel's ``clock_hz``, or the
        ports' own ``port_clock_hz``), at most its share of its pseudo-channel's achievable
        bandwidth."""
        if port_bits not in self.port_bits:
            raise HbmError(f"{self.name}: port width {port_bits!r} bits is not offered; the "
                           f"widths are {', '.join(map(str, self.port_bits))}")
        if self.port_clock_hz is not None:
            clock_hz = self.port_clock_hz
        return min(port_bits / 8 * clock_hz,
                   self.channel_bytes_per_s * self.efficiency / self.ports_per_channel)


# The U280's figures: UG1393 "HBM Configuration and Use" (32 pseudo-channels of 256 MB, 14.375
# GB/s theoretical each, 460 GB/s in all, one AXI port per pseudo-channel through the HBM
# switch) and PG276 (the ports are 256 bits wide at up to 450 MHz). Its efficiency: about 425
# GB/s measured by public streaming benchmarks of the U280 (the figure issue 14 quotes), i.e.
# 0.92 of the theoretical. The V80's: its data sheet's 32 GB of HBM2e at 819 GB/s, i.e. 32
# pseudo-channels of 25.6 GB/s (64 bits at 3.2 Gb/s a pin), reached through the NoC's HBM
# master units (HBM_NMU), 32 a stack (two a pseudo-channel), 32 to 256 bits wide (PG313 "AXI
# Considerations": 512 not supported), on the NoC side of an asynchronous crossing at up to
# 500 MHz at speed grade -2 (DS960 Table 1); at 400 MHz, 256 bits move 12.8 GB/s, more than a
# port's 11.8 GB/s share of its pseudo-channel, so 400 MHz saturates the HBM (the figure
# issue 41 reads in PG313). The HBM is on the top horizontal NoC in SLR2. No measured
# efficiency was found, so the U280's is assumed.
U280_HBM = HbmSpec(
    "u280-hbm2", 32, 14.375e9, 425e9 / 460e9, 1, (256, 512), 300e-9, 8 * 2**30,
    "AMD UG1393 (HBM Configuration and Use): 32 pseudo-channels x 14.375 GB/s = 460 GB/s; "
    "PG276: 256-bit AXI ports at up to 450 MHz; a 512-bit port through a width converter and "
    "clock crossing",
    "about 425 GB/s of 460 measured by public streaming benchmarks (as quoted in issue 14); "
    "read latency 300 ns assumed (the order of published HBM2 latencies on Alveo cards)")
V80_HBM = HbmSpec(
    "v80-hbm2e", 32, 819e9 / 32, 425e9 / 460e9, 2, (256,), 300e-9, 32 * 2**30,
    "Alveo V80 data sheet: HBM2e 32 GB, 819 GB/s (32 pseudo-channels x 25.6 GB/s); PG313 "
    "(AXI Considerations): HBM NoC master units 32 to 256 bits wide, 32 a stack (two a "
    "pseudo-channel), reached through the top horizontal NoC in SLR2",
    "assumed equal to the U280's measured 0.92 (no published V80 streaming measurement found); "
    "read latency 300 ns assumed",
    port_clock_hz=400e6,
    port_clock_source="the NoC side of the HBM master units at 400 MHz (DS960 Table 1: up to "
                      "500 MHz at -2; 400 MHz saturates the HBM, issue 41 reading PG313); the "
                      "crossing costs an asynchronous FIFO a port (estimated, not synthesized: "
                      "256 bits x 32 deep in LUT RAM, about 300 LUTs and 600 flip-flops a port) "
                      "and its latency, a few cycles, in the read latency's 300 ns")
HBM_SPECS = {s.name: s for s in (U280_HBM, V80_HBM)}


@dataclass(frozen=True)
class PortPlan:
    """One stream's ports: ``ports`` of ``port_bits`` each, the largest slice
    ``slice_bytes`` of its ``beat_bytes`` beat, sustaining ``beats_per_cycle`` (at most 1) at
    the kernel clock."""

    stream: str
    beat_bytes: int
    ports: int
    port_bits: int
    slice_bytes: int
    beats_per_cycle: float
    clock_crossing: bool
    bytes_per_s: float  # sustained
    shared: bool = False  # on the weight stream's ports, their bandwidth borrowed
    port_clock_hz: float | None = None  # the ports' own clock (None: the kernel's)

    def describe(self) -> str:
        if self.shared:
            return (f"{self.stream}: {self.beat_bytes} B/beat time-shared on the weights' "
                    f"ports (their bandwidth taken first while it flows)")
        crossing = ", width converter + clock crossing" if self.clock_crossing else ""
        if self.port_clock_hz is not None:
            crossing = f", asynchronous crossing to a {self.port_clock_hz / 1e6:g} MHz port clock"
        if self.slice_bytes * 8 > self.port_bits:
            crossing += f", each slice over {-(-self.slice_bytes * 8 // self.port_bits)} port beats"
        plural = "s" if self.ports > 1 else ""
        return (f"{self.stream}: {self.beat_bytes} B/beat over {self.ports} x "
                f"{self.port_bits}-bit port{plural} ({self.slice_bytes} B each{crossing}): "
                f"{self.beats_per_cycle:.3f} beats/cycle, {self.bytes_per_s / 1e9:.1f} GB/s")


def plan_stream(hbm: HbmSpec, stream: str, beat_bytes: int, clock_hz: float,
                max_ports: int, *, fewest_ports: bool = False) -> PortPlan:
    """The ports for one stream of ``beat_bytes`` a cycle: the fewest that sustain a beat a
    cycle, with native ports if they can (with ``fewest_ports``, the fewest of any width, native
    on a tie: a narrow stream leaves the weights the most ports); if no split of ``max_ports``
    or fewer can, the one that sustains the most. A slice wider than its port arrives over
    several of the port's beats (the port's width converter assembles it), so its stream runs
    below a beat a cycle."""
    checks.integer(f"{stream}: beat_bytes", beat_bytes, low=1, error=HbmError)
    if not clock_hz > 0:
        raise HbmError(f"clock_hz must be positive, not {clock_hz!r}")
    if isinstance(max_ports, bool) or not isinstance(max_ports, int) or max_ports < 1:
        raise HbmError(f"{stream}: no HBM port left for it ({hbm.name} has {hbm.ports} ports "
                       f"in all)")
    best, full = None, []
    for width in hbm.port_bits:  # native first: a crossing only where it is needed
        for ports in range(1, min(max_ports, beat_bytes) + 1):
            largest = slice_bytes(beat_bytes, ports)[0]
            rate = min(1.0, hbm.port_bytes_per_s(width, clock_hz) / (largest * clock_hz))
            crossing = width != hbm.native_port_bits or hbm.port_clock_hz is not None
            plan = PortPlan(stream, beat_bytes, ports, width, largest, rate, crossing,
                            rate * beat_bytes * clock_hz, port_clock_hz=hbm.port_clock_hz)
            if rate >= 1.0:
                full.append(plan)
                break
            if best is None or rate > best.beats_per_cycle + 1e-12:
                best = plan
        if full and not fewest_ports:
            break
    if full:
        return min(full, key=lambda plan: plan.ports)  # (the first of equals: native)
    return best


@dataclass(frozen=True)
class MemoryPlan:
    """Every stream's ports at a kernel clock: the weights take the ports the others leave
    (``shared`` false), or every port, the parameters and the key and value rows time-shared
    on them (``shared``)."""

    hbm: HbmSpec
    clock_hz: float
    streams: tuple[PortPlan, ...]
    shared: bool = False

    def stream(self, name: str) -> PortPlan:
        for s in self.streams:
            if s.stream == name:
                return s
        raise KeyError(f"no stream {name!r} in the plan; the streams are "
                       f"{', '.join(s.stream for s in self.streams)}")

    @property
    def weight_beats_per_cycle(self) -> float:
        return self.stream("weights").beats_per_cycle

    @property
    def ports_used(self) -> int:
        return sum(s.ports for s in self.streams if not s.shared)

    def describe(self) -> str:
        return "; ".join(s.describe() for s in self.streams) + \
            f" ({self.ports_used} of {self.hbm.ports} ports)"


def _narrow_beats(kv_row_bytes: int, param_width: int) -> list[tuple[str, int]]:
    """The narrow streams and their beats' bytes: the parameters, and the key and value rows
    when the KV cache is in memory (``kv_row_bytes`` > 0)."""
    checks.integer("kv_row_bytes", kv_row_bytes, low=0, error=HbmError)
    narrow = [("params", param_beat_bytes(param_width))]
    if kv_row_bytes:
        narrow.append(("kv_rows", kv_row_bytes))
    return narrow


def _narrow_streams(hbm: HbmSpec, clock_hz: float, kv_row_bytes: int,
                    param_width: int) -> list[PortPlan]:
    """The ports of the parameter stream and of the key and value rows (one stream: see the
    module's docstring), each at a beat a cycle."""
    left = hbm.ports
    streams = []
    for name, beat in _narrow_beats(kv_row_bytes, param_width):
        plan = plan_stream(hbm, name, beat, clock_hz, left, fewest_ports=True)
        if plan.beats_per_cycle < 1.0:
            raise HbmError(f"{name}: {hbm.name} cannot sustain its {beat}-byte beat a cycle at "
                           f"{clock_hz / 1e6:g} MHz on {left} port(s): it needs "
                           f"{beat * clock_hz / 1e9:.1f} GB/s, they carry at most "
                           f"{plan.bytes_per_s / 1e9:.1f} GB/s")
        streams.append(plan)
        left -= plan.ports
    return streams


def plan_memory(hbm: HbmSpec, clock_hz: float, stream_bytes: int, *, kv_row_bytes: int = 0,
                param_width: int = 1, shared: bool = False) -> MemoryPlan:
    """The ports of the parameter stream (``param_width`` entries a beat), the key and value
    rows (one stream of ``kv_row_bytes`` a beat, 0: the KV cache is on chip) and the weight stream
    (``stream_bytes`` a beat) at ``clock_hz``.

    Dedicated (``shared`` false): the narrow streams must sustain a beat a cycle, each on the
    fewest ports that can; the weights take what ports are left (the fewest that sustain a beat
    a cycle, or the best split of them all).

    Time-shared (``shared``): the weights are split over every port, and the parameter beats
    and the key and value rows are read on the same ports, in the weights' address space, ahead
    of the weights whenever they are wanted (a pass's parameters as its operator starts, the
    rows as the attention asks for them): they cost the weights the bytes they move, and
    nothing while they do not flow. The narrow streams must still reach a beat a cycle on all
    the ports together."""
    if not shared:
        streams = _narrow_streams(hbm, clock_hz, kv_row_bytes, param_width)
        left = hbm.ports - sum(s.ports for s in streams)
        streams.append(plan_stream(hbm, "weights", stream_bytes, clock_hz, left))
        return MemoryPlan(hbm, clock_hz, tuple(streams))
    weights = plan_stream(hbm, "weights", stream_bytes, clock_hz, hbm.ports)
    streams = []
    for name, beat in _narrow_beats(kv_row_bytes, param_width):
        # what the weights' ports carry at most, if the stream had them alone
        total = hbm.ports * hbm.port_bytes_per_s(weights.port_bits, clock_hz)
        rate = min(1.0, total / (beat * clock_hz))
        if rate < 1.0:
            raise HbmError(f"{name}: {hbm.name} cannot sustain its {beat}-byte beat a cycle at "
                           f"{clock_hz / 1e6:g} MHz on all {hbm.ports} ports: it needs "
                           f"{beat * clock_hz / 1e9:.1f} GB/s, they carry at most "
                           f"{total / 1e9:.1f} GB/s")
        streams.append(PortPlan(name, beat, weights.ports, weights.port_bits,
                                -(-beat // weights.ports), rate, weights.clock_crossing,
                                rate * beat * clock_hz, shared=True))
    return MemoryPlan(hbm, clock_hz, (*streams, weights), shared=True)


def weight_ceiling_bytes_per_s(hbm: HbmSpec, clock_hz: float, *, kv_row_bytes: int = 0,
                               param_width: int = 1) -> float:
    """The most a weight stream of any width sustains at ``clock_hz`` on the ports the narrow
    streams leave (:func:`plan_memory`'s split): those ports at the widest width."""
    left = hbm.ports - sum(s.ports for s in _narrow_streams(hbm, clock_hz, kv_row_bytes,
                                                            param_width))
    return left * hbm.port_bytes_per_s(max(hbm.port_bits), clock_hz)


def roofline_bytes_per_s(hbm: HbmSpec, clock_hz: float) -> float:
    """The most all the board's ports together sustain at ``clock_hz`` (the widest ports):
    its achievable bandwidth unless ports at the kernel clock cannot carry it."""
    return hbm.ports * hbm.port_bytes_per_s(max(hbm.port_bits), clock_hz)
