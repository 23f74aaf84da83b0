"""The testbench's HBM model for cocotb: serves the decoder's weight and parameter requests from
the :func:`heteroreason.model.decode_schedule.decode_schedule` images.

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

from heteroreason.model.decode_schedule import DecodeSchedule

__all__ = ["HbmChannel", "packed_param_beats", "packed_weight_beats"]


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
                 addr_bits: int, rng: random.Random, latency: int = 0, stall: float = 0.0):
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
            if count == 0 or addr + count > len(self._beats):
                raise AssertionError(f"{self.name}: request of {count} beats at {addr} outside "
                                     f"the image of {len(self._beats)} beats")
            self._pending.append([cycle + 1 + self.latency, addr, addr + count])
            self.requests += 1
