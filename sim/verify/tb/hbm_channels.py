"""The testbench's HBM model for cocotb: serves the decoder's weight and parameter requests from
the :func:`heteroreason.rtl.decoder.decode_schedule.decode_schedule` images.

Requests (``addr``, ``count``) are taken every cycle and queue, as in a pipelined memory; each
request's first beat may leave ``latency`` cycles after it was taken, then one beat per cycle at
most, each cycle skipped with probability ``stall`` (so the mean bandwidth is ``1 - stall`` beats
per cycle). A beat once offered stays on the port until taken.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

import numpy as np

from heteroreason.model import checks
from heteroreason.rtl.decoder.core import PARAM_LAYOUT
from heteroreason.rtl.decoder.decode_schedule import DecodeSchedule
from heteroreason.rtl.decoder.weight_schedule import slice_bytes
from heteroreason.sim.verify.tb.port_gaps import PortGaps
from heteroreason.sim.verify.tb.streams import Payload

__all__ = ["HbmChannel", "KvMemory", "RowBeats", "SharedRows", "StripedChannel",
           "packed_param_beats", "packed_weight_beats"]


def packed_weight_beats(schedule: DecodeSchedule, stream_bytes: int) -> list[int]:
    """The weight image as flat port values, element 0 of a beat in the low byte."""
    image = np.ascontiguousarray(schedule.stream_image(stream_bytes).astype(np.int8))
    raw = image.view(np.uint8).tobytes()
    return [int.from_bytes(raw[i:i + stream_bytes], "little")
            for i in range(0, len(raw), stream_bytes)]


def packed_param_beats(schedule: DecodeSchedule) -> list[int]:
    """The parameter image as flat port values: ``param_width`` entries of ``PARAM_LAYOUT``
    (value, mult, shift), entry 0 in the low bits."""
    out = []
    for beat in schedule.param_image.tolist():
        word = 0
        for k, (value, mult, shift) in enumerate(beat):
            entry = (value & 0xFFFF_FFFF) | (mult << 32) | (shift << 63)
            word |= entry << (PARAM_LAYOUT.size * k)
        out.append(word)
    return out


def _check_port(latency, stall, what: str = "") -> None:
    if not 0.0 <= stall < 1.0:
        raise ValueError(f"{what}stall must be in [0, 1), not {stall!r}")
    checks.integer(f"{what}latency", latency, low=0)


class _StreamPorts:
    """A request stream and its response stream (e.g. ``wreq``/``wdata``): the handles, the
    beat on offer and the requests taken."""

    def __init__(self, dut, request: str, response: str, *, size: int, addr_bits: int):
        self._req_valid = getattr(dut, f"{request}__valid")
        self._req_ready = getattr(dut, f"{request}__ready")
        self._req_payload = getattr(dut, f"{request}__payload")
        self._valid = getattr(dut, f"{response}__valid")
        self._ready = getattr(dut, f"{response}__ready")
        self._payload = getattr(dut, f"{response}__payload")
        self.name = response
        self._size = size
        self._addr_mask = (1 << addr_bits) - 1
        self._addr_bits = addr_bits
        self._offered: int | None = None  # the address of the beat on offer
        self.requests = 0
        self.beats_sent = 0

    def idle_port(self) -> None:
        self._req_ready.value = 0
        self._valid.value = 0

    def _offer(self, value: int | None) -> None:
        if self._offered is None:
            self._valid.value = 0
        else:
            self._valid.value = 1
            self._payload.value = value

    def _observe_ports(self) -> tuple[int, int] | None:
        """The offered beat leaves if taken; a request taken this cycle: its (first address,
        end)."""
        if self._offered is not None and int(self._ready.value):
            self._offered = None
            self.beats_sent += 1
        if not int(self._req_valid.value):
            return None
        word = int(self._req_payload.value)
        addr, count = word & self._addr_mask, word >> self._addr_bits
        if count == 0 or addr + count > self._size:
            raise AssertionError(f"{self.name}: request of {count} beats at {addr} outside "
                                 f"the memory of {self._size} beats")
        self.requests += 1
        return addr, addr + count


class HbmChannel(_StreamPorts):
    """One request stream and its response stream, e.g. ``wreq``/``wdata``."""

    def __init__(self, dut, request: str, response: str, beats, *,
                 addr_bits: int, rng: random.Random, latency: int = 0, stall: float = 0.0,
                 size: int | None = None):
        _check_port(latency, stall)
        super().__init__(dut, request, response, size=len(beats) if size is None else size,
                         addr_bits=addr_bits)
        # a list of beats (an address a beat), or rows served several a beat (:class:`RowBeats`)
        self._beats = beats
        self._per_beat = beats.per_beat if isinstance(beats, RowBeats) else 1
        self._offered_end = 0
        self._rng = rng
        self.latency = latency
        self.stall = stall
        self._pending: deque[list[int]] = deque()  # [first cycle, next address, end]

    def __repr__(self) -> str:
        return (f"HbmChannel({self.name}: {self.requests} requests, {self.beats_sent} beats "
                f"sent, offered {self._offered}, pending {list(self._pending)[:3]})")

    @property
    def busy(self) -> bool:
        return self._offered is not None or bool(self._pending)

    def drive(self, cycle: int) -> None:
        self._req_ready.value = 1
        if self._offered is None and self._pending and self._pending[0][0] <= cycle \
                and self._rng.random() >= self.stall:
            head = self._pending[0]
            self._offered, self._offered_end = head[1], head[2]
            head[1] += self._per_beat
            if head[1] >= head[2]:
                self._pending.popleft()
        if self._offered is None:
            self._offer(None)
        elif isinstance(self._beats, RowBeats):
            self._offer(self._beats.value(self._offered, self._offered_end))
        else:
            self._offer(self._beats[self._offered])

    def observe(self, cycle: int) -> None:
        request = self._observe_ports()
        if request is not None:
            self._pending.append([cycle + 1 + self.latency, *request])


class StripedChannel(_StreamPorts):
    """A stream split byte-wise over HBM ports, as :func:`~heteroreason.model.timing.fpga.hbm.
    slice_bytes` splits it: each port serves its slice of every requested beat with its own
    latency and its share ``stall`` of skipped cycles (laid out as ``gaps`` and ``refresh``
    say: :mod:`.port_gaps`) into a FIFO of ``fifo_depth`` slices (the aligner a design
    puts behind its ports), and a beat is offered when every port's slice of it has arrived.
    With uneven ports the stream runs at the slowest port's pace, in bursts."""

    def __init__(self, dut, request: str, response: str, beats: Sequence[int], *,
                 beat_bytes: int, ports: Sequence[tuple[int, float]], addr_bits: int,
                 rng: random.Random, fifo_depth: int = 8, gaps: str = "random",
                 refresh: tuple[int, int] = ()):
        if not ports:
            raise ValueError("ports must name at least one (latency, stall) pair")
        for latency, stall in ports:
            _check_port(latency, stall, "a port's ")
        checks.integer("fifo_depth", fifo_depth, low=1)
        super().__init__(dut, request, response, size=len(beats), addr_bits=addr_bits)
        self._beats = beats
        self._rng = rng
        self._ports = tuple(ports)
        self._gaps = [PortGaps(stall, pattern=gaps, rng=rng, refresh=refresh)
                      for _, stall in ports]
        self._depth = fifo_depth
        offsets, at = [], 0
        for size in slice_bytes(beat_bytes, len(ports)):
            offsets.append((8 * at, (1 << 8 * size) - 1))
            at += size
        self._slices = tuple(offsets)
        self._pending: list[deque[list[int]]] = [deque() for _ in ports]
        self._fifos: list[deque[tuple[int, int]]] = [deque() for _ in ports]  # (beat, value)
        self._value = 0

    def __repr__(self) -> str:
        return (f"StripedChannel({self.name}: {len(self._ports)} ports, {self.requests} "
                f"requests, {self.beats_sent} beats sent, fifo levels "
                f"{[len(f) for f in self._fifos]})")

    @property
    def busy(self) -> bool:
        return self._offered is not None or any(self._pending) or any(self._fifos)

    def drive(self, cycle: int) -> None:
        self._req_ready.value = 1
        for k, gaps in enumerate(self._gaps):
            pending, fifo = self._pending[k], self._fifos[k]
            if pending and pending[0][0] <= cycle and len(fifo) < self._depth \
                    and not gaps.skip(cycle):
                head = pending[0]
                shift, mask = self._slices[k]
                fifo.append((head[1], (self._beats[head[1]] >> shift) & mask))
                head[1] += 1
                if head[1] == head[2]:
                    pending.popleft()
        if self._offered is None and all(self._fifos):
            parts = [fifo.popleft() for fifo in self._fifos]
            beat = parts[0][0]
            if any(b != beat for b, _ in parts):
                raise AssertionError(f"{self.name}: the ports' slices are of different beats "
                                     f"{[b for b, _ in parts]}")
            self._offered = beat
            self._value = 0
            for (shift, _), (_, value) in zip(self._slices, parts, strict=True):
                self._value |= value << shift
        self._offer(self._value)

    def observe(self, cycle: int) -> None:
        request = self._observe_ports()
        if request is not None:
            for k, (latency, _) in enumerate(self._ports):
                self._pending[k].append([cycle + 1 + latency, *request])


class _Rows(dict):
    def __init__(self, what: str, *, unwritten_reads_zero: bool):
        super().__init__()
        self.what = what
        self.unwritten_reads_zero = unwritten_reads_zero

    def __missing__(self, addr):
        if self.unwritten_reads_zero:
            return 0
        raise AssertionError(f"{self.what} row {addr} read before it was written")


class RowBeats:
    """A table of rows served ``per_beat`` a beat: the beat at address ``a`` of a request that
    ends at ``end`` packs rows ``a``, ``a + 1``, ... (the first in the low bits); those at or past
    ``end`` are random bits (the reader must ignore them)."""

    def __init__(self, table, *, per_beat: int, row_bits: int, rng: random.Random):
        self.table = table
        self.per_beat = per_beat
        self.row_bits = row_bits
        self._rng = rng

    def __len__(self) -> int:
        return len(self.table)

    def value(self, addr: int, end: int) -> int:
        if self.per_beat == 1:  # a row as the table holds it
            return self.table[addr]
        word = 0
        for r in range(self.per_beat):
            row = self.table[addr + r] if addr + r < end else \
                self._rng.getrandbits(self.row_bits)
            word |= row << (r * self.row_bits)
        return word


class SharedRows:
    """The key and value rows on one set of ports (:func:`~heteroreason.model.timing.fpga.hbm.
    plan_memory`'s ``kv_rows`` stream): the requests on ``k_req`` and ``v_req`` join one queue
    in the order they are taken (a key request before a value request taken in the same cycle)
    and are served in that order, a row a cycle at most, each after ``latency`` cycles and each
    cycle skipped with probability ``stall``; a row on offer, on ``k_rows`` or ``v_rows``, stays
    there until taken and holds back every row behind it. The attention unit takes a job's key
    rows in its score pass and its value rows only in its weighted-sum pass, so one row a cycle
    serves both."""

    def __init__(self, dut, keys, values, *, addr_bits: int, rows: int, rng: random.Random,
                 latency: int = 0, stall: float = 0.0, per_beat: int = 1, row_bits: int = 0):
        _check_port(latency, stall)
        self.k = _StreamPorts(dut, "k_req", "k_rows", size=rows, addr_bits=addr_bits)
        self.v = _StreamPorts(dut, "v_req", "v_rows", size=rows, addr_bits=addr_bits)
        self._rows = {kind: RowBeats(table, per_beat=per_beat, row_bits=row_bits, rng=rng)
                      for kind, table in (("k", keys), ("v", values))}
        self._per_beat = per_beat
        self._ends = {"k": 0, "v": 0}
        self._rng = rng
        self.latency = latency
        self.stall = stall
        self._pending: deque[list] = deque()  # [first cycle, next address, end, "k" or "v"]
        self._on_offer: str | None = None  # the port the row on offer is on

    def __repr__(self) -> str:
        return (f"SharedRows({self.k.requests} key and {self.v.requests} value requests, "
                f"{self.k.beats_sent} + {self.v.beats_sent} rows sent, on offer "
                f"{self._on_offer}, pending {list(self._pending)[:3]})")

    @property
    def busy(self) -> bool:
        return self._on_offer is not None or bool(self._pending)

    def idle_port(self) -> None:
        self.k.idle_port()
        self.v.idle_port()

    def drive(self, cycle: int) -> None:
        self.k._req_ready.value = 1
        self.v._req_ready.value = 1
        if self._on_offer is None and self._pending and self._pending[0][0] <= cycle \
                and self._rng.random() >= self.stall:
            head = self._pending[0]
            self._on_offer = head[3]
            port = self.k if head[3] == "k" else self.v
            port._offered = head[1]
            self._ends[head[3]] = head[2]
            head[1] += self._per_beat
            if head[1] >= head[2]:
                self._pending.popleft()
        for kind, port in (("k", self.k), ("v", self.v)):
            offered = port._offered if self._on_offer == kind else None
            port._offer(None if offered is None else
                        self._rows[kind].value(offered, self._ends[kind]))

    def observe(self, cycle: int) -> None:
        for kind, port in (("k", self.k), ("v", self.v)):
            request = port._observe_ports()
            if self._on_offer == kind and port._offered is None:
                self._on_offer = None
            if request is not None:
                self._pending.append([cycle + 1 + self.latency, *request, kind])


class KvMemory:
    """An external KV cache: ``kv_store`` writes a K and a V row at an address (always ready);
    ``k_req``/``k_rows`` and ``v_req``/``v_rows`` read them back, on ports of their own (two
    :class:`HbmChannel` s) or, with ``shared``, on one set of ports (:class:`SharedRows`).
    A row read before it was written is an error, or zeros with ``unwritten_reads_zero`` (timing
    runs at positions no token was written at)."""

    def __init__(self, dut, store_layout, *, rows: int, rng: random.Random, latency: int = 0,
                 stall: float = 0.0, unwritten_reads_zero: bool = False, shared: bool = False,
                 per_beat: int = 1, serve_reads: bool = True):
        self._valid = dut.kv_store__valid
        self._ready = dut.kv_store__ready
        self._data = dut.kv_store__payload
        self._payload = Payload(store_layout)
        self.keys = _Rows("key", unwritten_reads_zero=unwritten_reads_zero)
        self.values = _Rows("value", unwritten_reads_zero=unwritten_reads_zero)
        addr_bits = max(1, (rows - 1).bit_length())
        row_bits = self._payload.fields["k"][1]
        self.rows = rows
        self.readers = ()
        if not serve_reads:  # (the reads are another model's: :class:`SharedPorts`)
            pass
        elif shared:
            self.readers = (SharedRows(dut, self.keys, self.values, addr_bits=addr_bits,
                                       rows=rows, rng=rng, latency=latency, stall=stall,
                                       per_beat=per_beat, row_bits=row_bits),)
        else:
            self.readers = tuple(
                HbmChannel(dut, f"{kind}_req", f"{kind}_rows",
                           RowBeats(table, per_beat=per_beat, row_bits=row_bits, rng=rng),
                           addr_bits=addr_bits, rng=rng, latency=latency, stall=stall,
                           size=rows)
                for kind, table in (("k", self.keys), ("v", self.values)))
        self.writes = 0

    @property
    def busy(self) -> bool:
        return any(reader.busy for reader in self.readers)

    def idle_port(self) -> None:
        self._ready.value = 0
        for reader in self.readers:
            reader.idle_port()

    def drive(self, cycle: int) -> None:
        self._ready.value = 1
        for reader in self.readers:
            reader.drive(cycle)

    def observe(self, cycle: int) -> None:
        self.store(cycle)
        for reader in self.readers:
            reader.observe(cycle)

    def store(self, cycle: int) -> None:
        """A ``kv_store`` beat offered this cycle is written (the port is always ready)."""
        if int(self._valid.value):
            beat = self._payload.unpack(int(self._data.value))
            self.keys[beat["addr"]] = beat["k"] & ((1 << self._payload.fields["k"][1]) - 1)
            self.values[beat["addr"]] = beat["v"] & ((1 << self._payload.fields["v"][1]) - 1)
            self.writes += 1

