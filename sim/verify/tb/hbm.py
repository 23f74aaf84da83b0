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

from heteroreason.rtl.decoder.decode_schedule import DecodeSchedule
from heteroreason.sim.verify.tb.streams import Payload

__all__ = ["HbmChannel", "KvMemory", "packed_param_beats", "packed_weight_beats"]


def packed_weight_beats(schedule: DecodeSchedule, stream_bytes: int) -> list[int]:
    """The weight image as flat port values, element 0 of a beat in the low byte."""
    image = np.ascontiguousarray(schedule.stream_image(stream_bytes).astype(np.int8))
    raw = image.view(np.uint8).tobytes()
    return [int.from_bytes(raw[i:i + stream_bytes], "little")
            for i in range(0, len(raw), stream_bytes)]


def packed_param_beats(schedule: DecodeSchedule) -> list[int]:
    """The parameter image as flat port values of ``PARAM_LAYOUT`` (value, mult, shift)."""
    out = []
    for value, mult, shift in schedule.param_image.tolist():
        out.append((value & 0xFFFF_FFFF) | (mult << 32) | (shift << 63))
    return out


class HbmChannel:
    """One request stream and its response stream, e.g. ``wreq``/``wdata``."""

    def __init__(self, dut, request: str, response: str, beats: Sequence[int], *,
                 addr_bits: int, rng: random.Random, latency: int = 0, stall: float = 0.0,
                 size: int | None = None):
        if not 0.0 <= stall < 1.0:
            raise ValueError(f"stall must be in [0, 1), not {stall!r}")
        if isinstance(latency, bool) or not isinstance(latency, int) or latency < 0:
            raise ValueError(f"latency must be a non-negative integer, not {latency!r}")
        self._req_valid = getattr(dut, f"{request}__valid")
        self._req_ready = getattr(dut, f"{request}__ready")
        self._req_payload = getattr(dut, f"{request}__payload")
        self._valid = getattr(dut, f"{response}__valid")
        self._ready = getattr(dut, f"{response}__ready")
        self._payload = getattr(dut, f"{response}__payload")
        self.name = response
        self._beats = beats
        self._size = len(beats) if size is None else size
        self._addr_mask = (1 << addr_bits) - 1
        self._addr_bits = addr_bits
        self._rng = rng
        self.latency = latency
        self.stall = stall
        self._pending: deque[list[int]] = deque()  # [first cycle, next address, end]
        self._offered: int | None = None
        self.requests = 0
        self.beats_sent = 0

    def __repr__(self) -> str:
        return (f"HbmChannel({self.name}: {self.requests} requests, {self.beats_sent} beats "
                f"sent, offered {self._offered}, pending {list(self._pending)[:3]})")

    @property
    def busy(self) -> bool:
        return self._offered is not None or bool(self._pending)

    def idle_port(self) -> None:
        self._req_ready.value = 0
        self._valid.value = 0

    def drive(self, cycle: int) -> None:
        self._req_ready.value = 1
        if self._offered is None and self._pending and self._pending[0][0] <= cycle \
                and self._rng.random() >= self.stall:
            head = self._pending[0]
            self._offered = head[1]
            head[1] += 1
            if head[1] == head[2]:
                self._pending.popleft()
        if self._offered is None:
            self._valid.value = 0
        else:
            self._valid.value = 1
            self._payload.value = self._beats[self._offered]

    def observe(self, cycle: int) -> None:
        if self._offered is not None and int(self._ready.value):
            self._offered = None
            self.beats_sent += 1
        if int(self._req_valid.value):
            word = int(self._req_payload.value)
            addr, count = word & self._addr_mask, word >> self._addr_bits
            if count == 0 or addr + count > self._size:
                raise AssertionError(f"{self.name}: request of {count} beats at {addr} outside "
                                     f"the memory of {self._size} beats")
            self._pending.append([cycle + 1 + self.latency, addr, addr + count])
            self.requests += 1


class _Rows(dict):
    def __init__(self, what: str, *, unwritten_reads_zero: bool):
        super().__init__()
        self.what = what
        self.unwritten_reads_zero = unwritten_reads_zero

    def __missing__(self, addr):
        if self.unwritten_reads_zero:
            return 0
        raise AssertionError(f"{self.what} row {addr} read before it was written")


class KvMemory:
    """An external KV cache: ``kv_store`` writes a K and a V row at an address (always ready);
    ``k_req``/``k_rows`` and ``v_req``/``v_rows`` read them back as :class:`HbmChannel` s do.
    A row read before it was written is an error, or zeros with ``unwritten_reads_zero`` (timing
    runs at positions no token was written at)."""

    def __init__(self, dut, store_layout, *, rows: int, rng: random.Random, latency: int = 0,
                 stall: float = 0.0, unwritten_reads_zero: bool = False):
        self._valid = dut.kv_store__valid
        self._ready = dut.kv_store__ready
        self._data = dut.kv_store__payload
        self._payload = Payload(store_layout)
        self.keys = _Rows("key", unwritten_reads_zero=unwritten_reads_zero)
        self.values = _Rows("value", unwritten_reads_zero=unwritten_reads_zero)
        addr_bits = max(1, (rows - 1).bit_length())
        self.k = HbmChannel(dut, "k_req", "k_rows", self.keys, addr_bits=addr_bits, rng=rng,
                            latency=latency, stall=stall, size=rows)
        self.v = HbmChannel(dut, "v_req", "v_rows", self.values, addr_bits=addr_bits, rng=rng,
                            latency=latency, stall=stall, size=rows)
        self.writes = 0

    @property
    def busy(self) -> bool:
        return self.k.busy or self.v.busy

    def idle_port(self) -> None:
        self._ready.value = 0
        self.k.idle_port()
        self.v.idle_port()

    def drive(self, cycle: int) -> None:
        self._ready.value = 1
        self.k.drive(cycle)
        self.v.drive(cycle)

    def observe(self, cycle: int) -> None:
        if int(self._valid.value):
            beat = self._payload.unpack(int(self._data.value))
            self.keys[beat["addr"]] = beat["k"] & ((1 << self._payload.fields["k"][1]) - 1)
            self.values[beat["addr"]] = beat["v"] & ((1 << self._payload.fields["v"][1]) - 1)
            self.writes += 1
        self.k.observe(cycle)
        self.v.observe(cycle)
