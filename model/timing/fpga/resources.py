"""A decoder design's resources on an FPGA, estimated from its parameters (the design search
prices every candidate so; a synthesis of a given design is ``heteroreason export --synth``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config
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
    """Resources of a DraftEngine for ``config`` with ``params`` (see the module docstring)."""
    hd, hp, v = config.head_dim, params.heads_parallel, params.vector_width
    macs, k, nr = params.beat_bytes, params.rows_per_beat, params.kv_rows
    # MVU lanes (``lanes`` of each of ``rows_per_beat`` rows); score and value products; per
    # extra vector lane a squarer (RMSNorm), a phase and two rotation products (RoPE), and an
    # output requantizer (attention, ~4 slices); per extra RMSNorm gain lane its two scaling
    # products and its requantizer: 8 slices (the 896-element norm synthesized at 1, 16 and 32
    # gains: 40, 160 and 288 DSPs); per extra SwiGLU lane its product and requantizer: 5 slices
    # (the unit synthesized at 1 and 2 lanes: 5 and 10 DSPs); per extra KV row a cycle, each
    # head's score and value products again, its exponential's requantizer (2 slices) and its
    # probability's three partial products (estimated, not synthesized)
    multipliers = macs + 2 * hp * hd * nr + 5 * hp * (nr - 1) + 8 * (v - 1) + \
        8 * (params.param_width - 1) + 5 * (k - 1)
    # coefficients from two syntheses (Yosys synth_xilinx, UltraScale+): the test-small engine
    # (16 MACs, 4 heads of 16: LUT 20,179, DSP 199, BRAM18K 78) and the 896-lane MVU alone
    # (LUT 77,520, DSP 902: 86 LUTs a lane for the adder tree and the vector buffer). The DSP
    # slices and the memories are counted unit by unit from the RTL's structure, the memories
    # as Yosys maps them (unit_resources: core_dsp, core_memories)
    dsp = core_dsp(config, params)
    bram18k, uram = core_memories(config, params)
    lut = 11_084 + 86 * macs + 60 * (multipliers - macs)
    return Resources(lut=lut, ff=lut // 4, dsp=dsp, bram18k=bram18k, uram=uram)


def batched_ingest_resources(config: Qwen2Config, params: DecoderParams,
                             batch: int) -> Resources:
    """:func:`estimate_resources` of ``params`` built with ``ingest_batch=batch``: per extra
    vector pair of the matrix-vector unit, a DSP slice per MAC lane (two vectors share one:
    :func:`~.unit_resources.core_dsp`); per extra vector and row, a
    requantizer of 6 slices; per extra vector and MAC lane, the 86 LUTs a lane of
    :func:`estimate_resources` (its adder tree); per extra token, a scratchpad bank
    (:func:`~.unit_resources.core_memories`) and SwiGLU lanes; and one copy of a norm's gains
    (18-Kbit blocks 36 bits wide and 512 deep).
    Synthesized (Yosys synth_xilinx), the 64-lane unit goes from LUT 2,462, FF 5,440, DSP 70
    at one vector to LUT 10,578, FF 19,470, DSP 152 at four: 42 LUTs and 73 flip-flops a lane
    and extra vector, so the 86 is about twice what the narrow unit measures."""
    checks.integer("batch", batch, low=1)
    base = estimate_resources(config, params)
    macs = params.beat_bytes
    dsp = core_dsp(config, params, batch) - core_dsp(config, params)
    lut = 86 * macs * (batch - 1)
    c = config
    gains = math.ceil(69 * params.param_width / 36) * math.ceil(c.hidden // params.param_width
                                                                / 512)
    bram, uram = core_memories(config, params, batch)
    return Resources(lut=base.lut + lut, ff=base.ff + 73 * macs * (batch - 1),
                     dsp=base.dsp + dsp, bram18k=bram + (gains if batch > 1 else 0), uram=uram)
