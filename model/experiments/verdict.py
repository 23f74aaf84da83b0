"""The answer first: per configuration and dataset, is HeteroReason (the draft on an FPGA) faster
than the GPU-only ``t2`` and the three-GPU ``baseline`` on the same traces, with which FPGA
model, at what energy, and how fast the FPGA draft would have to decode to break even.

The FPGA models compared (:data:`VERDICT_FPGAS`) are the paper artifact's U280 line (its
simulator's coefficients, 5.74 ms a token) and this project's designs for the U280 at 300 MHz and
the V80, each priced by the RTL-calibrated timing model at the clock its timing evidence backs.
The break-even is the decode cost per token at which ``heteroreason`` equals ``t2``, with the
other terms of :data:`BREAK_EVEN_BASE` kept (:func:`~.break_even.with_fpga_ms`): bracketed from
0.8 and 1.2 times the GPU draft's cost, then narrowed by the Illinois variant of false
position to :data:`BREAK_EVEN_TOLERANCE_MS` (latency rises with the cost per token; the bracket
is widened until it holds the crossing, and reported as outside it where it never does).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from heteroreason.model.experiments.break_even import (
    BreakEven,
    Crossing,
    heteroreason_latency_s,
)
from heteroreason.model.experiments.reproduce import ReproRow
from heteroreason.model.system.config import GPU_DRAFTS, SystemConfig, system_config
from heteroreason.model.workload.traces import ProblemTrace

__all__ = ["BREAK_EVEN_BASE", "VERDICT_FPGAS", "FpgaOutcome", "VerdictRow", "break_even_vs_t2",
           "format_verdict", "verdict_rows"]

# the FPGA models that matter for the verdict, and how the table names them
VERDICT_FPGAS = {"artifact": "artifact U280", "rtl-u280-300": "u280-300", "rtl-v80": "v80"}
BREAK_EVEN_BASE = "rtl-u280-300"
BREAK_EVEN_TOLERANCE_MS = 0.02
# the widest bracket searched (ms a token): far beyond any draft this project models
BREAK_EVEN_LIMITS_MS = (0.01, 1000.0)


@dataclass(frozen=True)
class FpgaOutcome:
    """``heteroreason`` with one FPGA model on one trace set."""

    fpga: str
    latency_s: float
    j_per_token: float
    over_t2: float  # t2's latency over this one's: above 1 is faster than t2
    over_baseline: float


@dataclass(frozen=True)
class VerdictRow:
    """One configuration and dataset (traces with backtracking)."""

    config: str
    dataset: str
    baseline_s: float
    t2_s: float
    baseline_j_per_token: float
    t2_j_per_token: float
    fpgas: tuple[FpgaOutcome, ...]
    break_even: BreakEven


def break_even_vs_t2(traces: Sequence[ProblemTrace], config: SystemConfig, t2_latency_s: float,
                     *, dataset: str = "", tolerance_ms: float = BREAK_EVEN_TOLERANCE_MS
                     ) -> BreakEven:
    """The FPGA decode cost per token at which ``heteroreason`` on ``config`` is as fast as
    ``t2`` (latency ``t2_latency_s``) on ``traces``: the largest cost, to ``tolerance_ms``, at
    which it is no slower."""
    low_limit, high_limit = BREAK_EVEN_LIMITS_MS
    # a first bracket around the GPU draft's own cost, where the crossing usually lies (the
    # FPGA draft then buys about what the overlap of its step-ahead work does)
    gpu = config.draft_gpu.decode_ms_per_token
    lo, hi = max(low_limit, 0.8 * gpu), min(high_limit, 1.2 * gpu)

    def excess(ms: float) -> float:
        return heteroreason_latency_s(traces, config, ms) - t2_latency_s

    f_lo, f_hi = excess(lo), excess(hi)
    while f_lo > 0 and lo > low_limit:  # slower even at lo: look lower
        lo, hi, f_hi = max(low_limit, lo / 4), lo, f_lo
        f_lo = excess(lo)
    while f_hi <= 0 and hi < high_limit:  # no slower even at hi: look higher
        lo, f_lo, hi = hi, f_hi, min(high_limit, hi * 4)
        f_hi = excess(hi)
    found = Crossing.FOUND
    ms_per_token: float | None = None
    if f_lo > 0:
        found = Crossing.FPGA_SLOWER_THROUGHOUT
    elif f_hi <= 0:
        found = Crossing.FPGA_FASTER_THROUGHOUT
    else:
        ms_per_token = _illinois(excess, lo, hi, f_lo, f_hi, tolerance_ms)
    return BreakEven(config.name, dataset, "t2", t2_latency_s, low_limit, high_limit, found,
                     ms_per_token, config.fpga.base_decode_ms_per_token,
                     config.draft_gpu.decode_ms_per_token, config.fpga.name)


def _illinois(excess, lo: float, hi: float, f_lo: float, f_hi: float, tolerance: float) -> float:
    """The largest ``x`` in ``[lo, hi]`` (to ``tolerance``) with ``excess(x) <= 0``, given
    ``excess(lo) <= 0 < excess(hi)``: false position, halving the weight of an end that stays
    (the Illinois rule), each point followed by a probe a tolerance to its other side, which
    closes the bracket at once where the interpolation landed within a tolerance of the
    crossing (the latency is piecewise linear in the cost: it often does)."""
    side = 0
    while hi - lo > tolerance:
        x = hi - f_hi * (hi - lo) / (f_hi - f_lo) if f_hi != f_lo else (lo + hi) / 2
        x = min(max(x, lo + tolerance / 2), hi - tolerance / 2)
        f_x = excess(x)
        probe = x + tolerance if f_x <= 0 else x - tolerance
        if lo < probe < hi:
            f_probe = excess(probe)
            if f_x <= 0 < f_probe:
                return x
            if f_probe <= 0 < f_x:
                return probe
            x, f_x = probe, f_probe  # the probe lies on the same side, nearer the crossing
        if f_x <= 0:
            lo, f_lo = x, f_x
            if side == -1:
                f_hi /= 2
            side = -1
        else:
            hi, f_hi = x, f_x
            if side == 1:
                f_lo /= 2
            side = 1
    return lo


def verdict_rows(rows: Sequence[ReproRow], sets: Mapping[str, Sequence[ProblemTrace]], *,
                 gpu_draft: str = "measured") -> list[VerdictRow]:
    """The verdict of a reproduction's ``rows`` (those with backtracking, run with every model
    of :data:`VERDICT_FPGAS`), with the break-even against ``t2`` computed on ``sets``."""
    by_key = {(r.config, r.dataset, r.mode, r.fpga): r for r in rows if r.backtracking}
    verdicts = []
    for config_name, dataset in dict.fromkeys((r.config, r.dataset) for r in rows
                                              if r.backtracking):
        baseline = next(r for (c, d, m, _), r in by_key.items()
                        if (c, d, m) == (config_name, dataset, "baseline"))
        t2 = next(r for (c, d, m, _), r in by_key.items()
                  if (c, d, m) == (config_name, dataset, "t2"))
        outcomes = []
        for fpga in VERDICT_FPGAS:
            hr = by_key[(config_name, dataset, "heteroreason", fpga)].metrics
            outcomes.append(FpgaOutcome(fpga, hr.latency_s, hr.j_per_token_system,
                                        t2.metrics.latency_s / hr.latency_s,
                                        baseline.metrics.latency_s / hr.latency_s))
        config = system_config(config_name, fpga=BREAK_EVEN_BASE, gpu_draft=gpu_draft)
        verdicts.append(VerdictRow(
            config_name, dataset, baseline.metrics.latency_s, t2.metrics.latency_s,
            baseline.metrics.j_per_token_system, t2.metrics.j_per_token_system,
            tuple(outcomes),
            break_even_vs_t2(sets[dataset], config, t2.metrics.latency_s, dataset=dataset)))
    return verdicts


def _range(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}x" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}x"


def _sentence(config: str, verdicts: Sequence[VerdictRow]) -> str:
    """One configuration's verdict in words: which FPGA models make HeteroReason faster than
    the GPU-only t2 on every dataset, by how much, at what energy, and the break-even."""
    wins, others = [], []
    for fpga, label in VERDICT_FPGAS.items():
        mine = [(v, o) for v in verdicts for o in v.fpgas if o.fpga == fpga]
        speed = [o.over_t2 for _, o in mine]
        energy = [o.j_per_token / v.t2_j_per_token for v, o in mine]
        faster = sum(r > 1 for r in speed)
        if faster == len(mine):
            wins.append(f"{label} ({_range(speed)} t2's speed, {_range(energy)} its J/token)")
        elif faster == 0:
            others.append(f"with {label} it is slower on every dataset ({_range(speed)} "
                          "t2's speed)")
        else:
            others.append(f"with {label} it is faster on {faster} of {len(mine)} datasets "
                          f"({_range(speed)} t2's speed)")
    text = (f"{config}: HeteroReason beats the GPU-only t2 on every dataset with "
            + " and with ".join(wins) if wins else
            f"{config}: HeteroReason beats the GPU-only t2 with no FPGA model on every dataset")
    if others:
        text += "; " + "; ".join(others)
    evens = [v.break_even.ms_per_token for v in verdicts if v.break_even.ms_per_token]
    if evens:
        text += (f"; any FPGA draft faster than {min(evens):.2f}-{max(evens):.2f} ms/token "
                 "would beat it")
    return text + "."


def format_verdict(verdicts: Sequence[VerdictRow], *, gpu_draft: str, width: int = 100) -> str:
    """The verdict screen: one sentence per configuration first, then the models named, the
    latency table and the energy table, every line at most ``width`` columns."""
    config = system_config(verdicts[0].config, gpu_draft=gpu_draft)
    draft = config.draft_gpu
    gpu_source = GPU_DRAFTS[gpu_draft] or f"{draft.name}, the configuration's own"
    head = [f"GPU draft '{gpu_draft}' ({gpu_source}): {draft.decode_ms_per_token:.2f} "
            f"ms/token on {draft.device}. FPGA drafts: "
            + ", ".join(f"'{label}' {_fpga_ms(key, verdicts[0].config, gpu_draft):.2f} ms/token"
                        for key, label in VERDICT_FPGAS.items())
            + " (context 0; sources: OUT/sources.csv, run.json). x t2 and x base: the mode's "
              "latency over HeteroReason's, on the same traces (above 1: HeteroReason is "
              "faster). Break-even: the FPGA draft's ms/token at which HeteroReason equals t2 "
              f"(other terms of '{VERDICT_FPGAS[BREAK_EVEN_BASE]}')."]
    lines = []
    for config_name in dict.fromkeys(v.config for v in verdicts):
        lines += textwrap.wrap(_sentence(config_name, [v for v in verdicts
                                                       if v.config == config_name]), width)
    lines.append("")
    lines += [line for para in head for line in textwrap.wrap(para, width)]
    lines.append("")
    cols = "".join(f"{label:>19}" for label in VERDICT_FPGAS.values())
    lines.append(f"{'':16}{'latency s':>14}{'HeteroReason: latency s, x t2, x base':>57}")
    lines.append(f"{'config  dataset':<16}{'base':>7}{'t2':>7}{cols}{'even ms':>9}")
    for v in verdicts:
        cells = "".join(f"{o.latency_s:>7.2f}{o.over_t2:>6.2f}{o.over_baseline:>6.2f}"
                        for o in v.fpgas)
        even = v.break_even
        shown = f"{even.ms_per_token:.2f}" if even.ms_per_token is not None else (
            "none" if even.crossing is Crossing.FPGA_SLOWER_THROUGHOUT else "any")
        lines.append(f"{v.config:<8}{v.dataset[:8]:<8}{v.baseline_s:>7.2f}{v.t2_s:>7.2f}"
                     f"{cells}{shown:>9}")
    lines.append("")
    lines.append(f"{'J/token':<16}{'base':>7}{'t2':>7}"
                 + "".join(f"{label:>15}" for label in VERDICT_FPGAS.values()))
    for v in verdicts:
        lines.append(f"{v.config:<8}{v.dataset[:8]:<8}{v.baseline_j_per_token:>7.2f}"
                     f"{v.t2_j_per_token:>7.2f}"
                     + "".join(f"{o.j_per_token:>15.2f}" for o in v.fpgas))
    return "\n".join(lines)


def _fpga_ms(fpga: str, config: str, gpu_draft: str) -> float:
    return system_config(config, fpga=fpga, gpu_draft=gpu_draft).fpga.base_decode_ms_per_token
