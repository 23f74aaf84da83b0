"""The record of one RTL measurement, light enough for the timing model to import (the
measurement itself, :mod:`heteroreason.sim.measure.grid`, runs the simulator)."""

from __future__ import annotations

from dataclasses import dataclass

from heteroreason.rtl.decoder.params import DecoderParams

__all__ = ["Measured"]


@dataclass(frozen=True)
class Measured:
    """One RTL measurement: cycles of one decode token at ``position`` (the calibration's
    :class:`~heteroreason.model.timing.fpga.calibration.Point` prices it with the model)."""

    preset: str
    params: DecoderParams
    memory_latency_cycles: int
    position: int
    cycles: int
