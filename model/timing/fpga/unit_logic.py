"""The LUTs and flip-flops of a decoder core, unit by unit, from its syntheses.

Each unit of the core (the children ``heteroreason fit`` counts: ``mvu``, ``att``, ``att.pv``,
``norm``, ``rope``, ``swiglu``, ``sampler``, ``glue``, ``wbuf``, ``pbuf``) has LUTs and
flip-flops linear in one measure of its size (:data:`MEASURES`): the matrix-vector unit and the
top's glue (the buffers' output copies, the weight gearbox, the embedding's beat) in the beat's
bytes, the attention's two units in the products a cycle (heads x head dimension x KV rows),
RMSNorm in its gain lanes, RoPE in its vector lanes, SwiGLU and the sampler in the rows a beat,
the weight buffer in its depth (its few LUTs address its memories, whatever their width).
:data:`COEFFICIENTS` is the least-squares line of each unit through its counts in the fit
evidence's syntheses (``data/fit_evidence.json``: the small core and the U280 design's
full-width core at the same RTL, each unit a point; relative errors weighted alike); a unit
whose measure is the same in every synthesis gets its mean. With two syntheses the line goes
through both; the test (``tests/model/timing/fpga/test_unit_logic.py``) fits it again from the
evidence and fails when the two differ, and ``heteroreason fit`` prints the estimate's error
against each synthesized design (the V80 design's full-width core was synthesized after the
line was drawn: its error is out of sample).

The DSP slices and the memories are counted from structure (:mod:`.unit_resources`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config, qwen2_config
from heteroreason.rtl.decoder.params import DecoderParams

__all__ = ["BATCH_FF_PER_LANE", "BATCH_LUT_PER_LANE", "COEFFICIENTS", "FITTED_ON", "MEASURES",
           "UnitLine", "UnitPoint", "fit_unit_lines", "synthesized_points", "unit_logic"]

# each unit's measure of its size, from the core's parameters
MEASURES: dict[str, Callable[[Qwen2Config, DecoderParams], int]] = {
    "mvu": lambda c, p: p.beat_bytes,
    "att": lambda c, p: p.heads_parallel * c.head_dim * p.kv_rows,
    "att.pv": lambda c, p: p.heads_parallel * c.head_dim * p.kv_rows,
    "norm": lambda c, p: p.param_width,
    "rope": lambda c, p: p.vector_width,
    "swiglu": lambda c, p: p.rows_per_beat,
    "sampler": lambda c, p: p.rows_per_beat,
    "glue": lambda c, p: p.beat_bytes,
    "wbuf": lambda c, p: p.weight_buffer,
    "pbuf": lambda c, p: p.param_width,
}

# per MAC lane and extra vector a pass, the matrix-vector unit's LUTs and flip-flops: the
# 64-lane unit synthesized (Yosys synth_xilinx) at one vector, LUT 2,462 and FF 5,440, and at
# four, LUT 10,578 and FF 19,470: (10,578 - 2,462) / (64 x 3) and (19,470 - 5,440) / (64 x 3)
BATCH_LUT_PER_LANE = 42
BATCH_FF_PER_LANE = 73


@dataclass(frozen=True)
class UnitPoint:
    """One synthesized unit: its measure and what Yosys counted."""

    unit: str
    measure: int
    lut: int
    ff: int


@dataclass(frozen=True)
class UnitLine:
    """A unit's LUTs and flip-flops as ``(constant, per unit of its measure)``, the syntheses
    they were fitted on and the largest relative error on them."""

    lut: tuple[float, float]
    ff: tuple[float, float]
    points: int
    worst: float

    def at(self, measure: int) -> tuple[int, int]:
        """``(lut, ff)`` at ``measure``."""
        return (round(self.lut[0] + self.lut[1] * measure),
                round(self.ff[0] + self.ff[1] * measure))


def _line(xs: list[int], ys: list[int]) -> tuple[float, float]:
    """Weighted least squares of ``y = a + b x`` (each point's error relative to its ``y``),
    or the mean when every ``x`` is the same; by the normal equations, no library."""
    w = [1.0 / max(y, 1) ** 2 for y in ys]
    if len(set(xs)) == 1:
        return round(sum(wi * y for wi, y in zip(w, ys, strict=True)) / sum(w), 3), 0.0
    rows = list(zip(w, xs, ys, strict=True))
    s = sum(w)
    sx = sum(wi * x for wi, x, _ in rows)
    sy = sum(wi * y for wi, _, y in rows)
    sxx = sum(wi * x * x for wi, x, _ in rows)
    sxy = sum(wi * x * y for wi, x, y in rows)
    b = (s * sxy - sx * sy) / (s * sxx - sx * sx)
    return round((sy - b * sx) / s, 3), round(b, 3)


def fit_unit_lines(points: Iterable[UnitPoint]) -> dict[str, UnitLine]:
    """Each unit's line through its ``points`` (see the module docstring)."""
    by_unit: dict[str, list[UnitPoint]] = {}
    for pt in points:
        by_unit.setdefault(pt.unit, []).append(pt)
    out = {}
    for unit, mine in sorted(by_unit.items()):
        xs = [pt.measure for pt in mine]
        lut = _line(xs, [pt.lut for pt in mine])
        ff = _line(xs, [pt.ff for pt in mine])
        worst = max(abs(a + b * pt.measure - y) / max(y, 1) for pt in mine
                    for (a, b), y in ((lut, pt.lut), (ff, pt.ff)))
        out[unit] = UnitLine(lut, ff, len(mine), round(worst, 4))
    return out


def synthesized_points(designs: Iterable) -> list[UnitPoint]:
    """Each unit of the synthesized ``designs`` (the fit evidence's
    :class:`~heteroreason.model.timing.fpga.fit.DesignFit` records) as a point."""
    points = []
    for d in designs:
        config = qwen2_config(d.design.preset)
        for unit, measure in MEASURES.items():
            if unit in d.units:
                points.append(UnitPoint(unit, measure(config, d.design.params),
                                        d.units[unit]["lut"], d.units[unit]["ff"]))
    return points


# fit_unit_lines over these designs of the fit evidence (data/fit_evidence.json, RTL
# e146f683e85f: the small core and the U280 design's full-width core, 448 lanes x 4 rows);
# another design there is out of sample
FITTED_ON = ("small", "u280-300")
COEFFICIENTS: Mapping[str, UnitLine] = {
    "att": UnitLine(lut=(1610.074, 35.108), ff=(4475.704, 69.973), points=2, worst=0.0),
    "att.pv": UnitLine(lut=(5085.296, 56.245), ff=(7048.889, 97.127), points=2, worst=0.0),
    "glue": UnitLine(lut=(2525.615, 20.144), ff=(5048.154, 48.53), points=2, worst=0.0),
    "mvu": UnitLine(lut=(3113.385, 27.13), ff=(4777.769, 58.33), points=2, worst=0.0),
    "norm": UnitLine(lut=(328.0, 805.625), ff=(616.667, 1195.167), points=2, worst=0.0),
    "pbuf": UnitLine(lut=(31.0, -0.0), ff=(26.0, 0.0), points=2, worst=0.0),
    "rope": UnitLine(lut=(-27.667, 99.333), ff=(-75.667, 256.958), points=2, worst=0.0),
    "sampler": UnitLine(lut=(354.329, 0.0), ff=(298.052, 0.0), points=2, worst=0.1129),
    "swiglu": UnitLine(lut=(1461.995, 0.0), ff=(2565.0, 0.0), points=2, worst=0.0014),
    "wbuf": UnitLine(lut=(39.467, 0.006), ff=(26.333, 0.007), points=2, worst=0.0378),
}


def unit_logic(config: Qwen2Config, params: DecoderParams,
               batch: int = 1) -> dict[str, tuple[int, int]]:
    """``(lut, ff)`` of each unit of a decoder core of ``params`` for ``config``, built with
    ``batch`` vectors a pass (the matrix-vector unit's extra vectors:
    :data:`BATCH_LUT_PER_LANE`)."""
    out = {unit: COEFFICIENTS[unit].at(measure(config, params))
           for unit, measure in MEASURES.items()}
    lut, ff = out["mvu"]
    extra = params.beat_bytes * (batch - 1)
    out["mvu"] = (lut + BATCH_LUT_PER_LANE * extra, ff + BATCH_FF_PER_LANE * extra)
    return out
