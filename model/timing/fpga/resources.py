"""A decoder design's resources on an FPGA, estimated from its parameters (the design search
prices every candidate so; ``heteroreason fit`` sets the estimate beside the synthesized
cores)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config
from heteroreason.model.timing.fpga.unit_logic import unit_logic
from heteroreason.model.timing.fpga.unit_resources import core_dsp, core_memories
from heteroreason.rtl.decoder.params import DecoderParams

__all__ = ["Resources", "batched_ingest_resources", "estimate_resources"]


@dataclass(frozen=True)
class Resources:
    lut: int
    ff: int
    dsp: int
    bram18k: int
    uram: int

    def fits(self, other: Resources) -> bool:
        return all(getattr(self, f) <= getattr(other, f) for f in
                   ("lut", "ff", "dsp", "bram18k", "uram"))


def estimate_resources(config: Qwen2Config, params: DecoderParams) -> Resources:
    """Resources of a decoder core for ``config`` with ``params``: the LUTs and flip-flops of
    its units from their syntheses (:func:`~.unit_logic.unit_logic`), the DSP slices and the
    memories from the RTL's structure, the memories as Yosys maps them
    (:func:`~.unit_resources.core_dsp`, :func:`~.unit_resources.core_memories`); each against
    the synthesized cores in ``heteroreason fit``."""
    return _core(config, params, 1)


def _core(config: Qwen2Config, params: DecoderParams, batch: int) -> Resources:
    logic = unit_logic(config, params, batch).values()
    bram18k, uram = core_memories(config, params, batch)
    return Resources(lut=sum(lut for lut, _ in logic), ff=sum(ff for _, ff in logic),
                     dsp=core_dsp(config, params, batch), bram18k=bram18k, uram=uram)


def batched_ingest_resources(config: Qwen2Config, params: DecoderParams,
                             batch: int) -> Resources:
    """:func:`estimate_resources` of ``params`` built with ``ingest_batch=batch``: per extra
    vector pair of the matrix-vector unit, a DSP slice per MAC lane (two vectors share one:
    :func:`~.unit_resources.core_dsp`); per extra vector and row, a requantizer of 6 slices;
    per extra vector and MAC lane, its adder tree's and registers' LUTs and flip-flops
    (:func:`~.unit_logic.unit_logic`); per extra token, a scratchpad bank
    (:func:`~.unit_resources.core_memories`) and SwiGLU lanes; and one copy of a norm's gains
    (18-Kbit blocks 36 bits wide and 512 deep)."""
    checks.integer("batch", batch, low=1)
    core = _core(config, params, batch)
    if batch == 1:
        return core
    gains = math.ceil(69 * params.param_width / 36) * math.ceil(
        config.hidden // params.param_width / 512)
    return Resources(lut=core.lut, ff=core.ff, dsp=core.dsp, bram18k=core.bram18k + gains,
                     uram=core.uram)
