"""The FPGA draft's break-even: the decode cost per token at which ``heteroreason`` (the draft on
the FPGA) is exactly as fast as a GPU-only mode (``t2``, ``baseline``) on the same traces.

The FPGA draft is the configuration's own FPGA model with its ``decode_ms_per_token`` replaced
and its decode floor dropped (its per-call and KV terms, its ingest cost and its board's power
kept), so the answer is in the unit a board's projection prints (a model's own mark is its
``base_decode_ms_per_token``: the floor where one binds). The compared mode's latency does not
depend on the FPGA. The search evaluates a log-spaced grid over ``[low_ms, high_ms]`` (the
plotted curve), then narrows the bracket the crossing lies in by bisection to the largest
cost at which ``heteroreason``'s mean latency is no longer than the other mode's; the latency
does not fall as the draft slows (``tests/model/experiments/test_break_even.py`` checks it on
a grid). A break-even outside the range is reported as such (the FPGA is slower even at
``low_ms``, or faster even at ``high_ms``), never clamped to the range's ends.

:func:`ingest_sensitivity` asks the same question of the shadow ingest: ``heteroreason``'s mean
latency with the FPGA's ingest cost per token (the weight pass: its per-token term and its
floor) scaled, what a batched ingest that streams the weights once for several tokens would buy
(each token's attention, the KV term, is kept).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from heteroreason.model import checks
from heteroreason.model.system.config import ServingMode, SystemConfig, system_config
from heteroreason.model.system.simulate import simulate
from heteroreason.model.workload.traces import ProblemTrace

__all__ = ["BreakEven", "Crossing", "IngestSensitivity", "break_even", "break_even_table",
           "break_evens", "heteroreason_latency_s", "ingest_sensitivity", "latency_grid_ms",
           "with_fpga_ms", "with_ingest_scaled"]

DEFAULT_RANGE_MS = (0.05, 100.0)
DEFAULT_TOLERANCE_MS = 0.01


class Crossing(str, enum.Enum):
    """Where the break-even lies relative to the searched range."""

    FOUND = "found"
    FPGA_SLOWER_THROUGHOUT = "fpga-slower-throughout"  # heteroreason loses even at low_ms
    FPGA_FASTER_THROUGHOUT = "fpga-faster-throughout"  # heteroreason wins even at high_ms

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class BreakEven:
    """One break-even: ``ms_per_token`` is set when ``crossing`` is :attr:`Crossing.FOUND`."""

    config: str
    dataset: str
    against: str
    against_latency_s: float
    low_ms: float
    high_ms: float
    crossing: Crossing
    ms_per_token: float | None
    fpga_ms_per_token: float  # the configuration's FPGA draft, for comparison
    gpu_draft_ms_per_token: float
    fpga: str = ""  # the FPGA model whose other terms were kept

    HEADER = ("config", "dataset", "FPGA model", "against", "its latency s",
              "break-even ms/token", "FPGA model ms/token", "GPU draft ms/token")

    def cells(self) -> list[str]:
        if self.crossing is Crossing.FOUND:
            where = f"{self.ms_per_token:.2f}"
        elif self.crossing is Crossing.FPGA_SLOWER_THROUGHOUT:
            where = f"< {self.low_ms:g} (none)"
        else:
            where = f"> {self.high_ms:g}"
        return [self.config, self.dataset, self.fpga, self.against,
                f"{self.against_latency_s:.2f}", where,
                f"{self.fpga_ms_per_token:.2f}", f"{self.gpu_draft_ms_per_token:.2f}"]

    def describe(self) -> str:
        if self.crossing is Crossing.FOUND:
            return (f"{self.ms_per_token:.3f} ms/token (FPGA model {self.fpga_ms_per_token:.3f}, "
                    f"GPU draft {self.gpu_draft_ms_per_token:.3f})")
        if self.crossing is Crossing.FPGA_SLOWER_THROUGHOUT:
            return f"none in [{self.low_ms:g}, {self.high_ms:g}]: slower even at {self.low_ms:g}"
        return f"none in [{self.low_ms:g}, {self.high_ms:g}]: faster even at {self.high_ms:g}"


def with_fpga_ms(config: SystemConfig, ms_per_token: float) -> SystemConfig:
    """``config`` with its FPGA draft decoding at ``ms_per_token`` (everything else kept)."""
    fpga = replace(config.fpga, name=f"{config.fpga.name}@{ms_per_token:g}ms",
                   decode_ms_per_token=ms_per_token, decode_floor_ms_per_token=0.0,
                   source=f"{config.fpga.source}; decode_ms_per_token set to {ms_per_token:g} "
                          f"(no floor)")
    return replace(config, fpga=fpga)


def heteroreason_latency_s(traces: Sequence[ProblemTrace], config: SystemConfig,
                           ms_per_token: float) -> float:
    """Mean latency per problem of ``heteroreason`` with the FPGA at ``ms_per_token``."""
    result = simulate(traces, with_fpga_ms(config, ms_per_token), ServingMode.HETEROREASON,
                      keep_runs=False)
    return result.summary.latency_s


def _check_range(low_ms: float, high_ms: float, tolerance_ms: float) -> None:
    for name, value in (("low_ms", low_ms), ("high_ms", high_ms),
                        ("tolerance_ms", tolerance_ms)):
        checks.number(name, value, low=0, low_open=True)
    if low_ms >= high_ms:
        raise ValueError(f"low_ms must be below high_ms, not {low_ms!r} >= {high_ms!r}")


def latency_grid_ms(low_ms: float, high_ms: float, points: int = 9) -> list[float]:
    """``points`` FPGA costs spaced evenly in log scale from ``low_ms`` to ``high_ms``."""
    ratio = (high_ms / low_ms) ** (1 / (points - 1))
    return [low_ms * ratio**k for k in range(points - 1)] + [high_ms]


def break_evens(traces: Sequence[ProblemTrace], config: SystemConfig,
                against: Sequence[ServingMode | str] = (ServingMode.T2, ServingMode.BASELINE), *,
                dataset: str = "",
                low_ms: float = DEFAULT_RANGE_MS[0], high_ms: float = DEFAULT_RANGE_MS[1],
                tolerance_ms: float = DEFAULT_TOLERANCE_MS
                ) -> tuple[list[BreakEven], list[tuple[float, float]]]:
    """The FPGA decode cost per token at which ``heteroreason`` equals each mode of
    ``against`` on ``traces`` (to ``tolerance_ms``), or where it lies outside
    ``[low_ms, high_ms]``; and the curve it was read from, ``(ms/token, mean latency s)``
    pairs in increasing cost (a log-spaced grid, then every refinement)."""
    modes = [ServingMode.parse(a) if isinstance(a, str) else a for a in against]
    for mode in modes:
        if mode.on_fpga:
            raise ValueError("against must be modes without the FPGA (rsd, baseline, t2), "
                             f"not {mode.value!r}")
    _check_range(low_ms, high_ms, tolerance_ms)
    curve: dict[float, float] = {}

    def latency(ms: float) -> float:
        if ms not in curve:
            curve[ms] = heteroreason_latency_s(traces, config, ms)
        return curve[ms]

    grid = latency_grid_ms(float(low_ms), float(high_ms))
    for ms in grid:
        latency(ms)
    results = []
    for mode in modes:
        target = simulate(traces, config, mode, keep_runs=False).summary.latency_s
        above = [ms for ms in grid if curve[ms] > target]
        ms_per_token = None
        if grid[0] in above:
            crossing = Crossing.FPGA_SLOWER_THROUGHOUT
        elif not above:
            crossing = Crossing.FPGA_FASTER_THROUGHOUT
        else:
            crossing = Crossing.FOUND
            hi = above[0]
            lo = max(ms for ms in grid if ms < hi)  # the grid point below: no slower there
            ms_per_token = _crossing(lambda ms, target=target: latency(ms) - target, lo, hi,
                                     tolerance_ms)
        results.append(BreakEven(config.name, dataset, mode.value, target, float(low_ms),
                                 float(high_ms), crossing, ms_per_token,
                                 config.fpga.base_decode_ms_per_token,
                                 config.draft_gpu.decode_ms_per_token, config.fpga.name))
    return results, sorted(curve.items())


def break_even(traces: Sequence[ProblemTrace], config: SystemConfig, against: ServingMode | str,
               **options) -> BreakEven:
    """:func:`break_evens` for one mode."""
    return break_evens(traces, config, (against,), **options)[0][0]


def break_even_table(sets: dict[str, Sequence[ProblemTrace]], configs: Sequence[str], *,
                     fpga: str | None = None, gpu_draft: str = "measured",
                     against: Sequence[ServingMode | str] = (ServingMode.T2, ServingMode.BASELINE),
                     low_ms: float = DEFAULT_RANGE_MS[0], high_ms: float = DEFAULT_RANGE_MS[1],
                     progress: Callable[[str], None] | None = None):
    """:func:`break_evens` for every configuration (with the FPGA model ``fpga``) and trace
    set: the rows, and per ``(config, dataset)`` the curve and each mode's latency (what
    :func:`~heteroreason.model.experiments.plots.plot_break_even` draws)."""
    rows: list[BreakEven] = []
    panels = []
    for config_name in configs:
        config = system_config(config_name, fpga=fpga, gpu_draft=gpu_draft)
        for dataset, traces in sets.items():
            found, curve = break_evens(traces, config, against, dataset=dataset,
                                       low_ms=low_ms, high_ms=high_ms)
            rows += found
            panels.append((config_name, dataset, curve,
                           {b.against: b.against_latency_s for b in found}))
            if progress:
                progress(f"{config_name} {dataset}: {len(curve)} replays of "
                         f"{len(traces)} problems")
    return rows, panels


@dataclass(frozen=True)
class IngestSensitivity:
    """``heteroreason``'s mean latency with the FPGA's ingest cost per token scaled by
    ``ingest_scale`` (``ingest_ms_per_token``: the scaled cost of a token at context 0), and its
    change from the unscaled one."""

    config: str
    dataset: str
    ingest_scale: float
    ingest_ms_per_token: float
    latency_s: float
    change_pct: float

    HEADER = ("config", "dataset", "ingest scale", "ingest ms/token (ctx 0)", "latency s",
              "change %")

    def cells(self) -> list[str]:
        return [self.config, self.dataset, f"{self.ingest_scale:g}",
                f"{self.ingest_ms_per_token:.3f}", f"{self.latency_s:.4f}",
                f"{self.change_pct:+.3f}"]


def with_ingest_scaled(config: SystemConfig, scale: float) -> SystemConfig:
    """``config`` with its FPGA's ingest cost per token and its ingest floor times ``scale``
    (a model without an ingest cost of its own ingests at its decode cost: that is scaled),
    everything else kept."""
    checks.number("ingest scale", scale, low=0)
    fpga = config.fpga
    per_token = fpga.decode_ms_per_token if fpga.ingest_ms_per_token is None \
        else fpga.ingest_ms_per_token
    fpga = replace(fpga, name=f"{fpga.name}@ingest x{scale:g}",
                   ingest_ms_per_token=per_token * scale,
                   ingest_floor_ms_per_token=fpga.ingest_floor_ms_per_token * scale,
                   source=f"{fpga.source}; ingest per token x{scale:g}")
    return replace(config, fpga=fpga)


def ingest_sensitivity(traces: Sequence[ProblemTrace], config: SystemConfig,
                       scales: Sequence[float], *, dataset: str = ""
                       ) -> list[IngestSensitivity]:
    """:class:`IngestSensitivity` at each of ``scales`` (the change against scale 1, the
    configuration as it is, which is replayed too)."""
    scaled = [with_ingest_scaled(config, scale) for scale in scales]  # bad scales refused first
    base = simulate(traces, config, ServingMode.HETEROREASON, keep_runs=False).summary.latency_s
    rows = []
    for scale, variant in zip(scales, scaled, strict=True):
        latency = simulate(traces, variant, ServingMode.HETEROREASON,
                           keep_runs=False).summary.latency_s
        rows.append(IngestSensitivity(config.name, dataset, float(scale),
                                      variant.fpga.ingest_ms(1, 0), latency,
                                      100 * (latency / base - 1)))
    return rows


def _crossing(excess, lo: float, hi: float, tolerance: float) -> float:
    """The largest ``x`` in ``[lo, hi]`` (to ``tolerance``) with ``excess(x) <= 0``, given
    ``excess(lo) <= 0 < excess(hi)``: bisection (the bracket is one step of the log grid)."""
    while hi - lo > tolerance:
        mid = (lo + hi) / 2
        if excess(mid) <= 0:
            lo = mid
        else:
            hi = mid
    return lo
