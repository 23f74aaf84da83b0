"""Typed valid/ready stream driver and monitor for cocotb, over Amaranth stream ports.

Amaranth flattens a stream port ``name`` into ``name__valid``, ``name__ready`` and
``name__payload``, the payload a flat vector with the layout's first field in the LSBs. Both
classes are clocked by the testbench: ``drive()`` right after a falling edge, ``observe()`` in
the read-only phase before the next rising edge, so a beat is reported in the cycle it transfers.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping

from amaranth.hdl import Shape
from amaranth.lib import data

__all__ = ["Payload", "StreamSink", "StreamSource"]


class Payload:
    """Packs and unpacks the fields of an Amaranth ``StructLayout`` or ``ArrayLayout`` (keys are
    field names or element indices) as plain ints, signed fields in two's complement; a plain
    shape is one field named ``""``."""

    def __init__(self, layout: data.Layout):
        self.fields = {}
        if not isinstance(layout, data.Layout):
            shape = Shape.cast(layout)
            self.fields[""] = (0, shape.width, shape.signed)
            self.width = shape.width
            return
        for name, field in layout:
            shape = Shape.cast(field.shape)
            self.fields[name] = (field.offset, shape.width, shape.signed)
        self.width = layout.size

    def pack(self, values: Mapping) -> int:
        unknown = set(values) - set(self.fields)
        if unknown:
            raise KeyError(f"unknown payload field(s) {sorted(unknown)}; "
                           f"fields are {sorted(self.fields)}")
        word = 0
        for name, value in values.items():
            offset, width, is_signed = self.fields[name]
            value = int(value)
            low, high = (-(1 << (width - 1)), 1 << (width - 1)) if is_signed else (0, 1 << width)
            if not low <= value < high:
                raise ValueError(f"field {name}={value} does not fit in {width} bits")
            word |= (value & ((1 << width) - 1)) << offset
        return word

    def unpack(self, word: int) -> dict:
        out = {}
        for name, (offset, width, is_signed) in self.fields.items():
            value = (word >> offset) & ((1 << width) - 1)
            if is_signed and value >> (width - 1):
                value -= 1 << width
            out[name] = value
        return out


def _bit(handle) -> int:
    return int(handle.value)


class _StreamPort:
    """The three handles of a flattened stream port and the generator that randomizes it."""

    def __init__(self, dut, name: str, layout: data.StructLayout, *, rng: random.Random,
                 probability: tuple[str, float]):
        what, value = probability
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{what} must be in [0, 1), not {value!r}")
        self.name = name
        self.payload = Payload(layout)
        self._valid = getattr(dut, f"{name}__valid")
        self._ready = getattr(dut, f"{name}__ready")
        self._data = getattr(dut, f"{name}__payload")
        self._rng = rng


class StreamSource(_StreamPort):
    """Drives beats into an input stream of the DUT, with random idle cycles between beats.

    Beats come from the queue (``send``) or, when it is empty, from ``supplier`` (called each
    cycle the source is free to offer; it returns a field dict or None). A beat once offered
    stays on the port, unchanged, until it transfers.
    """

    def __init__(self, dut, name: str, layout: data.StructLayout, *, rng: random.Random,
                 idle: float = 0.0, supplier: Callable[[], dict | None] | None = None):
        super().__init__(dut, name, layout, rng=rng, probability=("idle", idle))
        self.idle = idle
        self.supplier = supplier
        self.queue: deque[dict] = deque()
        self.offered: dict | None = None
        self.sent = 0

    def send(self, **fields: int) -> None:
        self.queue.append(fields)

    @property
    def busy(self) -> bool:
        return self.offered is not None or bool(self.queue)

    def idle_port(self) -> None:
        self._valid.value = 0
        self._data.value = 0

    def drive(self) -> None:
        if self.offered is None and self._rng.random() >= self.idle:
            if self.queue:
                self.offered = self.queue.popleft()
            elif self.supplier is not None:
                self.offered = self.supplier()
        if self.offered is None:
            self._valid.value = 0
        else:
            self._valid.value = 1
            self._data.value = self.payload.pack(self.offered)

    def observe(self) -> dict | None:
        """The beat that transfers in this cycle, if any."""
        if self.offered is not None and _bit(self._ready):
            beat, self.offered = self.offered, None
            self.sent += 1
            return beat
        return None


class StreamSink(_StreamPort):
    """Takes beats from an output stream of the DUT, with random backpressure.

    With ``stable`` set, a beat offered and not taken must be offered again, unchanged, in the
    next cycle (the stream rule); ``withdrawable`` names a predicate on such a beat under which
    the DUT may withdraw it instead.
    """

    def __init__(self, dut, name: str, layout: data.StructLayout, *, rng: random.Random,
                 backpressure: float = 0.0, stable: bool = True,
                 withdrawable: Callable[[dict], bool] | None = None):
        super().__init__(dut, name, layout, rng=rng, probability=("backpressure", backpressure))
        self.backpressure = backpressure
        self.stable = stable
        self.withdrawable = withdrawable
        self._waiting: dict | None = None
        self.received = 0

    def drive(self) -> None:
        self._ready.value = int(self._rng.random() >= self.backpressure)

    def observe(self) -> dict | None:
        """The beat that transfers in this cycle, if any; raises on a stream-rule violation."""
        valid = _bit(self._valid)
        beat = self.payload.unpack(int(self._data.value)) if valid else None
        changed = self.stable and self._waiting is not None and beat != self._waiting
        if changed and not (self.withdrawable and self.withdrawable(self._waiting)):
            raise AssertionError(
                    f"{self.name}: beat {self._waiting} was offered, not taken, then "
                    f"{'changed to ' + str(beat) if beat else 'withdrawn'}")
        if valid and _bit(self._ready):
            self._waiting = None
            self.received += 1
            return beat
        self._waiting = beat
        return None
