"""The testbench's HBM model with every stream time-shared on one set of ports
(:func:`~heteroreason.model.timing.fpga.hbm.plan_memory`'s ``shared`` plan): the weights
striped as :class:`~heteroreason.sim.verify.tb.hbm_channels.StripedChannel` stripes them, the
parameter beats and the KV cache's rows read on the same ports."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

from heteroreason.model import checks
from heteroreason.rtl.decoder.weight_schedule import slice_bytes
from heteroreason.sim.verify.tb.hbm_channels import KvMemory, RowBeats, _check_port, _StreamPorts
from heteroreason.sim.verify.tb.port_gaps import PortGaps

__all__ = ["SharedPorts"]


class SharedPorts:
    """Every stream on one set of HBM ports, time-shared (:func:`~heteroreason.model.timing.
    fpga.hbm.plan_memory`'s ``shared`` plan): the weights split byte-wise over the ports as
    :class:`StripedChannel` splits them, and the parameter beats and the KV cache's key and
    value rows (``kv_rows`` a beat) read on the same ports, each beat a slice a port.

    A port moves at most its weight slice's bytes a cycle, and none in a cycle it skips (the
    share ``stall`` of its cycles, laid out as ``gaps`` and ``refresh`` say:
    :class:`~heteroreason.sim.verify.tb.port_gaps.PortGaps`): it pays the narrow streams'
    slices first, then a weight slice if what is left of the cycle's bytes (and of the last
    cycle's) covers one. A request's
    slices may move ``latency`` cycles after it is taken. A narrow stream is fetched at most
    ``window`` beats ahead of the one its reader takes (the attention's value rows wait behind
    its key rows without taking the ports' time); a narrow beat is offered when every port has
    moved its slice; the weights as :class:`StripedChannel` offers them. KV writes
    (``kv_store``) are stored at once, without port time (a row a layer and KV head)."""

    def __init__(self, dut, *, weights: Sequence[int], stream_bytes: int, params: Sequence[int],
                 param_bytes: Sequence[int], kv: KvMemory | None, kv_row_bytes: int,
                 per_beat: int,
                 ports: Sequence[tuple[int, float]], addr_bits: int, kv_addr_bits: int,
                 rng: random.Random, fifo_depth: int = 8, window: int = 4,
                 gaps: str = "random", refresh: tuple[int, int] = ()):
        if not ports:
            raise ValueError("ports must name at least one (latency, stall) pair")
        for latency, stall in ports:
            _check_port(latency, stall, "a port's ")
        checks.integer("fifo_depth", fifo_depth, low=1)
        checks.integer("window", window, low=1)
        self._rng = rng
        self._ports = tuple(ports)
        self._gaps = [PortGaps(stall, pattern=gaps, rng=rng, refresh=refresh)
                      for _, stall in ports]
        self._depth = fifo_depth
        self._window = window
        self.weights = _StreamPorts(dut, "wreq", "wdata", size=len(weights), addr_bits=addr_bits)
        self._weight_beats = weights
        offsets, at = [], 0
        self._slot = slice_bytes(stream_bytes, len(ports))
        for size in self._slot:
            offsets.append((8 * at, (1 << 8 * size) - 1))
            at += size
        self._slices = tuple(offsets)
        self._pending: list[deque[list[int]]] = [deque() for _ in ports]
        self._fifos: list[deque[tuple[int, int]]] = [deque() for _ in ports]
        self._value = 0
        self._credit = [0] * len(ports)
        # the narrow streams: their ports, their beats' values, each port's slice of a beat
        self._narrow = {"p": _Narrow(_StreamPorts(dut, "preq", "pdata", size=len(params),
                                                  addr_bits=addr_bits),
                                     lambda addr, end: params[addr], 1, param_bytes, ports)}
        self.kv = kv
        if kv is not None:
            for kind, table in (("k", kv.keys), ("v", kv.values)):
                beats = RowBeats(table, per_beat=per_beat, row_bits=8 * kv_row_bytes // per_beat,
                                 rng=rng)
                self._narrow[kind] = _Narrow(
                    _StreamPorts(dut, f"{kind}_req", f"{kind}_rows", size=kv.rows,
                                 addr_bits=kv_addr_bits),
                    beats.value, per_beat, kv_row_bytes, ports)
        # each port's largest slice of a narrow beat
        self._largest = [max(n.largest(k) for n in self._narrow.values())
                         for k in range(len(ports))]

    def __repr__(self) -> str:
        return (f"SharedPorts({len(self._ports)} ports, {self.weights.beats_sent} weight beats, "
                + ", ".join(f"{k}: {n!r}" for k, n in self._narrow.items()) + ")")

    @property
    def beats_sent(self) -> int:
        """Weight beats sent."""
        return self.weights.beats_sent

    @property
    def busy(self) -> bool:
        return self.weights._offered is not None or any(self._pending) or \
            any(self._fifos) or any(n.busy for n in self._narrow.values())

    def idle_port(self) -> None:
        self.weights.idle_port()
        for narrow in self._narrow.values():
            narrow.ports.idle_port()
        if self.kv is not None:
            self.kv.idle_port()

    def drive(self, cycle: int) -> None:
        self.weights._req_ready.value = 1
        for narrow in self._narrow.values():
            narrow.ports._req_ready.value = 1
        if self.kv is not None:
            self.kv._ready.value = 1
        for k, gaps in enumerate(self._gaps):
            if gaps.skip(cycle):
                continue
            # a cycle's bytes and what is left of the last cycles', up to two weight slices
            # and a narrow one (unused cycles are not saved up beyond that)
            credit = min(self._credit[k] + self._slot[k], 2 * self._slot[k] + self._largest[k])
            for narrow in self._narrow.values():  # the narrow streams' slices first
                credit = narrow.pay(k, credit, cycle, self._window)
            pending, fifo = self._pending[k], self._fifos[k]
            if pending and pending[0][0] <= cycle and len(fifo) < self._depth \
                    and credit >= self._slot[k]:
                head = pending[0]
                shift, mask = self._slices[k]
                fifo.append((head[1], (self._weight_beats[head[1]] >> shift) & mask))
                credit -= self._slot[k]
                head[1] += 1
                if head[1] == head[2]:
                    pending.popleft()
            self._credit[k] = credit
        if self.weights._offered is None and all(self._fifos):
            parts = [fifo.popleft() for fifo in self._fifos]
            self.weights._offered = parts[0][0]
            self._value = 0
            for (shift, _), (_, value) in zip(self._slices, parts, strict=True):
                self._value |= value << shift
        self.weights._offer(self._value)
        for narrow in self._narrow.values():
            narrow.offer()

    def observe(self, cycle: int) -> None:
        request = self.weights._observe_ports()
        if request is not None:
            for k, (latency, _) in enumerate(self._ports):
                self._pending[k].append([cycle + 1 + latency, *request])
        for narrow in self._narrow.values():
            narrow.observe(cycle)
        if self.kv is not None:
            self.kv.store(cycle)


class _Narrow:
    """A narrow stream of :class:`SharedPorts`: its requests' beats (``per_beat`` addresses
    each; ``beat_bytes`` a beat, or a list of each address's, split over the ports as the
    weights are), the slices each port has moved, the beats taken."""

    def __init__(self, ports: _StreamPorts, value, per_beat: int,
                 beat_bytes: int | Sequence[int], hbm_ports: Sequence[tuple[int, float]]):
        self.ports = ports
        self._value = value
        self._per_beat = per_beat
        self._latency = [latency for latency, _ in hbm_ports]
        self._bytes = beat_bytes
        self._splits: dict[int, tuple[int, ...]] = {}
        self._beats: list[tuple[int, int, int]] = []  # (cycle taken, first address, end)
        self._paid = [0] * len(hbm_ports)  # beats each port has moved its slice of
        self._taken = 0

    def __repr__(self) -> str:
        return f"{len(self._beats)} beats asked, {self._taken} taken, ports at {self._paid}"

    @property
    def busy(self) -> bool:
        return self.ports._offered is not None or self._taken < len(self._beats)

    def pay(self, port: int, credit: int, cycle: int, window: int) -> int:
        """Port ``port`` moves its slices of the stream's next beats while its ``credit``
        covers them (and they lie within ``window`` of the reader); returns what is left."""
        while self._paid[port] < min(len(self._beats), self._taken + window):
            taken_at, addr, _ = self._beats[self._paid[port]]
            piece = self._split(addr)[port]
            if cycle < taken_at + 1 + self._latency[port] or credit < piece:
                break
            credit -= piece
            self._paid[port] += 1
        return credit

    def largest(self, port: int) -> int:
        """The port's largest slice of any of the stream's beats."""
        sizes = [self._bytes] if isinstance(self._bytes, int) else set(self._bytes)
        return max(self._split_of(size)[port] for size in sizes)

    def _split(self, addr: int) -> tuple[int, ...]:
        """Each port's bytes of the beat at ``addr``."""
        return self._split_of(self._bytes if isinstance(self._bytes, int) else self._bytes[addr])

    def _split_of(self, size: int) -> tuple[int, ...]:
        if size not in self._splits:
            ports = len(self._paid)
            self._splits[size] = slice_bytes(size, ports) if size >= ports else \
                tuple(1 if k < size else 0 for k in range(ports))
        return self._splits[size]

    def offer(self) -> None:
        if self.ports._offered is None and self._taken < len(self._beats) and \
                min(self._paid) > self._taken:
            self.ports._offered = self._taken
        if self.ports._offered is None:
            self.ports._offer(None)
        else:
            _, addr, end = self._beats[self.ports._offered]
            self.ports._offer(self._value(addr, end))

    def observe(self, cycle: int) -> None:
        if self.ports._offered is not None and int(self.ports._ready.value):
            self._taken += 1
        request = self.ports._observe_ports()
        if request is not None:
            addr, end = request
            self._beats.extend((cycle, a, end) for a in range(addr, end, self._per_beat))
