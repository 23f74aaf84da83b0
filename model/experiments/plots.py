"""PNG plots of a reproduction: ablation bars, per-device latency breakdown, a problem's Gantt."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from heteroreason.model.experiments.reproduce import DATASETS, PAPER_LATENCY_S, ReproRow
from heteroreason.model.system.records import ProblemRun

__all__ = ["plot_ablation", "plot_break_even", "plot_breakdown", "plot_gantt",
           "plot_validation"]

COLORS = {"draft": "#4c72b0", "prm": "#dd8452", "target": "#55a868", "link": "#c44e52",
          "stall": "#bbbbbb"}


def _save(fig, path: Path, **layout) -> Path:
    fig.tight_layout(**layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _datasets(rows: Sequence[ReproRow]) -> list[str]:
    """The paper's datasets first, in its order, then any others (e.g. captured traces)."""
    present = {r.dataset for r in rows}
    return [d for d in DATASETS if d in present] + sorted(present - set(DATASETS))


def _series(rows: Sequence[ReproRow]) -> list[tuple[str, bool, str, str]]:
    """``(mode, backtracking, fpga, label)`` of the ablation's bars: the GPU-only modes, then
    HeteroReason with each FPGA model the rows hold, with and without backtracking."""
    fpgas = list(dict.fromkeys(r.fpga for r in rows if r.fpga))
    return [("baseline", True, "", "baseline (3 GPUs)"), ("t2", True, "", "+T2 (GPU-only t2)"),
            *[("heteroreason", True, f, f"+T2+T1, FPGA '{f}'") for f in fpgas],
            *[("heteroreason", False, f, f"no backtracking, FPGA '{f}'") for f in fpgas[:1]]]


def _models_title(rows: Sequence[ReproRow]) -> str:
    """The models a figure shows: the GPU draft and the FPGA models."""
    fpgas = ", ".join(dict.fromkeys(r.fpga for r in rows if r.fpga))
    return f"GPU draft '{rows[0].gpu_draft}'; FPGA models: {fpgas}"


def plot_ablation(rows: Sequence[ReproRow], path: Path) -> Path:
    """Latency per dataset of each mode and FPGA model, the paper's Fig. 10 marked (its
    figures are for the artifact's FPGA line)."""
    configs = sorted({r.config for r in rows})
    datasets = _datasets(rows)
    series = _series(rows)
    fig, axes = plt.subplots(1, len(configs), figsize=(6.5 * len(configs), 4.4), squeeze=False)
    width = 0.8 / len(series)
    for ax, config in zip(axes[0], configs, strict=True):
        for k, (mode, bt, fpga, label) in enumerate(series):
            values = []
            for d in datasets:
                match = [r for r in rows if (r.config, r.dataset, r.mode, r.backtracking,
                                             r.fpga) == (config, d, mode, bt, fpga)]
                values.append(match[0].metrics.latency_s if match else 0.0)
            xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(datasets))]
            ax.bar(xs, values, width, label=label)
            paper = PAPER_LATENCY_S.get((config, mode, bt)) if fpga in ("", "artifact") \
                else None
            if paper and all(d in DATASETS for d in datasets):
                ax.scatter(xs, [paper[DATASETS.index(d)] for d in datasets], marker="_",
                           s=160, color="black", zorder=3,
                           label="paper (Fig. 10)" if k == 0 else None)
        ax.set_xticks(range(len(datasets)), datasets)
        ax.set_ylabel("latency (s/problem)")
        ax.set_title(f"{config}: ablation", fontsize=10)
        ax.legend(fontsize=6)
    fig.suptitle(_models_title(rows), fontsize=9)
    return _save(fig, path)


def plot_breakdown(rows: Sequence[ReproRow], path: Path) -> Path:
    """Per mode and FPGA model (with backtracking), per dataset: each device's busy seconds a
    problem side by side (devices run at once: their busy times overlap, so they are not
    stacked), the speculation stall beside them, and the latency as a line across."""
    configs = sorted({r.config for r in rows})
    datasets = _datasets(rows)
    bars = [(mode, fpga) for mode, bt, fpga, _ in _series(rows) if bt]
    names = ["base", "T2", *[f"HR\n{f.replace('rtl-', '')}" for _, f in bars[2:]]]
    devices = ("draft", "prm", "target", "stall")
    fig, axes = plt.subplots(len(configs), len(datasets), figsize=(3.6 * len(datasets),
                             3.4 * len(configs)), squeeze=False)
    for i, config in enumerate(configs):
        for j, dataset in enumerate(datasets):
            ax = axes[i][j]
            by_key = {(r.mode, r.fpga): r.metrics for r in rows
                      if (r.config, r.dataset, r.backtracking) == (config, dataset, True)}
            shown = [(x, by_key[bar]) for x, bar in enumerate(bars) if bar in by_key]
            for k, device in enumerate(devices):  # one call a device: each bar's share
                ax.bar([x + (k - 1.5) * 0.19 for x, _ in shown],
                       [m.stall_share * m.latency_s if device == "stall"
                        else m.utilization[device] * m.latency_s for _, m in shown],
                       0.19, color=COLORS[device])
            ax.hlines([m.latency_s for _, m in shown], [x - 0.42 for x, _ in shown],
                      [x + 0.42 for x, _ in shown], color="black")
            ax.set_xticks(range(len(bars)), names, fontsize=7)
            ax.set_title(f"{config} {dataset}", fontsize=9)
            if j == 0:
                ax.set_ylabel("busy s/problem (line: latency)")
    handles = [Patch(color=COLORS[k], label=k) for k in devices]
    fig.legend(handles=handles, loc="lower center", ncol=4)
    fig.suptitle(_models_title(rows), fontsize=9)
    return _save(fig, path, rect=(0, 0.05, 1, 1))


def plot_gantt(runs: Sequence[ProblemRun], path: Path) -> Path:
    """One row per resource and run; wasted work hatched, stalls grey."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 1.9 * len(runs) + 0.6), squeeze=False)
    resources = ["link", "target", "prm", "draft"]
    for ax, run in zip(axes[:, 0], runs, strict=True):
        groups: dict[tuple[str, str, bool], list[tuple[float, float]]] = {}
        for iv in run.intervals:  # one call per row, color and hatch: the same picture
            color = COLORS["stall"] if iv.kind == "stall" else COLORS[iv.resource]
            groups.setdefault((iv.resource, color, iv.wasted), []).append(
                (iv.start_ms / 1e3, max(iv.duration_ms / 1e3, 1e-4)))
        for (resource, color, wasted), spans in groups.items():
            y = resources.index(resource)
            ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=color,
                           hatch="///" if wasted else None, edgecolor="white", linewidth=0.3)
        ax.set_yticks(range(len(resources)), resources)
        ax.set_xlim(0, max(r.latency_ms for r in runs) / 1e3 * 1.01)
        fpga = f", FPGA {run.config.fpga.name}" if run.mode.on_fpga else ""
        ax.set_title(f"{run.trace.dataset}/{run.trace.problem_id} {run.config.name} "
                     f"{run.mode.value}{fpga}, GPU draft {run.config.draft_gpu.name}: "
                     f"{run.latency_ms / 1e3:.2f} s", fontsize=9)
    axes[-1, 0].set_xlabel("time (s); hatched: discarded work; grey: speculation stall")
    return _save(fig, path)


def plot_break_even(panels: Sequence[tuple[str, str, dict[str, list[tuple[float, float]]],
                                           dict[str, float]]],
                    marks: dict[str, dict[str, float]], path: Path, *, title: str = "") -> Path:
    """``heteroreason``'s latency against the FPGA draft's ms/token, one panel per
    ``(config, dataset, {FPGA model: curve}, latency of each GPU-only mode)``: each FPGA
    model's own curve (its other terms kept); ``marks[config]`` are draft speeds drawn as
    vertical lines (the GPU draft, the artifact's U280, this project's boards)."""
    columns = min(4, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (config, dataset, curves, gpu_modes) in zip(axes.flat, panels, strict=False):
        for k, (fpga, curve) in enumerate(curves.items()):
            ax.plot([c[0] for c in curve], [c[1] for c in curve],
                    color=("#4c72b0", "#c44e52", "#937860", "#da8bc3")[k % 4],
                    label=f"heteroreason, {fpga} terms")
        for k, (mode, latency) in enumerate(gpu_modes.items()):
            ax.axhline(latency, color=("#dd8452", "#55a868", "#8172b3")[k % 3], ls="--",
                       label=mode)
        for k, (name, ms) in enumerate(marks[config].items()):
            ax.axvline(ms, color="0.5", lw=0.8, ls=(":", "-.", "--")[k % 3])
            ax.annotate(name, (ms, 0.99 - 0.22 * (k % 2)), xycoords=("data", "axes fraction"),
                        rotation=90, fontsize=6, va="top", ha="right")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("FPGA draft (ms/token)")
        ax.set_ylabel("latency (s/problem)")
        ax.set_title(f"{config}: {dataset}", fontsize=9)
        ax.legend(fontsize=6, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_fleet_curves(curves: dict[str, Sequence[dict]], path: Path, *,
                      slo_s: float | None = None) -> Path:
    """Latency (P50, P99), throughput and energy per problem against the arrival rate, one
    line per fleet (the records of :func:`heteroreason.model.fleet.search.load_curve`)."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for label, rows in curves.items():
        rates = [r["rate_per_s"] for r in rows]
        line, = axes[0].plot(rates, [r["p99_s"] for r in rows], marker="o", label=f"{label} P99")
        axes[0].plot(rates, [r["p50_s"] for r in rows], ls="--", color=line.get_color(),
                     label=f"{label} P50")
        axes[1].plot(rates, [r["problems_per_s"] for r in rows], marker="o", label=label,
                     color=line.get_color())
        if rows and rows[0].get("goodput_per_s") is not None:
            axes[1].plot(rates, [r["goodput_per_s"] for r in rows], ls="--",
                         color=line.get_color(), label=f"{label} goodput")
        axes[2].plot(rates, [r["energy_j_per_problem"] for r in rows], marker="o", label=label,
                     color=line.get_color())
    if slo_s is not None:
        axes[0].axhline(slo_s, color="grey", ls=":", label=f"SLO {slo_s:g} s")
    axes[0].set(xlabel="arrivals / s", ylabel="latency (s)", yscale="log")
    axes[1].set(xlabel="arrivals / s", ylabel="problems finished / s (goodput: within the SLO)")
    axes[2].set(xlabel="arrivals / s", ylabel="energy per problem (J)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_fleet_sizing(rows: Sequence[dict], path: Path, *, rate_per_s: float | None = None) -> Path:
    """The pool-ratio map and the power frontier of a sizing search (the rows of
    ``heteroreason fleet size``): per PRM-pool size, goodput per kW at capacity over draft x target
    pool sizes; and capacity against active power, frontier points joined."""
    prms = sorted({r["prms"] for r in rows})
    drafts = sorted({r["drafts"] for r in rows})
    targets = sorted({r["targets"] for r in rows})
    fig, axes = plt.subplots(1, len(prms) + 1, figsize=(4.2 * (len(prms) + 1), 4))
    cells = {(r["drafts"], r["prms"], r["targets"]): r for r in rows}
    top = max(r["goodput_per_kw"] for r in rows)
    for ax, p in zip(axes, prms, strict=False):
        grid = [[cells[(d, p, t)]["goodput_per_kw"] for d in drafts] for t in targets]
        image = ax.imshow(grid, origin="lower", cmap="viridis", vmin=0, vmax=top, aspect="auto")
        for yi, line in enumerate(grid):
            for xi, value in enumerate(line):
                ax.text(xi, yi, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if value < 0.6 * top else "black")
        ax.set(xticks=range(len(drafts)), xticklabels=drafts, yticks=range(len(targets)),
               yticklabels=targets, xlabel="draft devices", ylabel="target GPUs",
               title=f"{p} PRM GPU(s): goodput (problems/s) per kW")
    fig.colorbar(image, ax=axes[len(prms) - 1], fraction=0.046)
    ax = axes[-1]
    ax.scatter([r["active_power_w"] for r in rows], [r["capacity_per_s"] for r in rows],
               s=14, color="grey", label="pool sizes")
    front = sorted((r for r in rows if r["frontier"]), key=lambda r: r["active_power_w"])
    ax.plot([r["active_power_w"] for r in front], [r["capacity_per_s"] for r in front],
            marker="o", color="C3", label="frontier")
    for r in front:
        ax.annotate(f"{r['drafts']}:{r['prms']}:{r['targets']}",
                    (r["active_power_w"], r["capacity_per_s"]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    if rate_per_s is not None:
        ax.axhline(rate_per_s, color="grey", ls=":", label=f"load {rate_per_s:g}/s")
    ax.set(xlabel="active power (W)", ylabel="capacity at the SLO (problems / s)",
           title="capacity against power")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_validation(groups: dict[str, Sequence[tuple[float, float]]], path: Path, *,
                    title: str) -> Path:
    """Modelled against measured latency per problem (seconds, log-log), one series per
    ``groups`` entry of ``(measured_s, modelled_s)``, the diagonal and a +-10 % band drawn."""
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    values = [v for pairs in groups.values() for pair in pairs for v in pair]
    low, high = min(values) / 1.3, max(values) * 1.3
    ax.plot([low, high], [low, high], color="0.3", lw=0.8)
    ax.fill_between([low, high], [0.9 * low, 0.9 * high], [1.1 * low, 1.1 * high],
                    color="0.85", label="+-10 %")
    for k, (name, pairs) in enumerate(groups.items()):
        ax.scatter([p[0] for p in pairs], [p[1] for p in pairs], s=6, alpha=0.6,
                   color=("#4c72b0", "#dd8452", "#55a868", "#c44e52")[k % 4], label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("measured (s/problem)")
    ax.set_ylabel("modelled (s/problem)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    return _save(fig, path)


def plot_schedule_ladder(rungs: Sequence[tuple[str, Sequence[float]]], path: Path, *,
                         title: str) -> Path:
    """Per-problem differences (fractions) of one replay against a reference, one row per
    ``rungs`` entry (name, differences), from the top: each problem a dot, the median a bar."""
    fig, ax = plt.subplots(figsize=(6.4, 0.42 * len(rungs) + 1.2))
    for k, (_, diffs) in enumerate(rungs):
        y = len(rungs) - 1 - k
        pct = [100 * d for d in diffs]
        jitter = [y + 0.25 * ((i * 0.618) % 1 - 0.5) for i in range(len(pct))]
        ax.scatter(pct, jitter, s=5, alpha=0.5, color="#4c72b0")
        median = sorted(pct)[len(pct) // 2]
        ax.plot([median, median], [y - 0.3, y + 0.3], color="#c44e52", lw=1.5)
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set_yticks(range(len(rungs)))
    ax.set_yticklabels([name for name, _ in reversed(rungs)], fontsize=7)
    ax.set_xscale("symlog", linthresh=0.1)
    widest = max([abs(100 * d) for _, diffs in rungs for d in diffs] + [1.0])
    ax.set_xlim(-1.3 * widest, 1.3 * widest)
    ticks = [t for t in (-100, -10, -1, -0.1, 0, 0.1, 1, 10, 100) if abs(t) <= 1.3 * widest]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks], fontsize=7)
    ax.set_xlabel("difference per problem (%, logarithmic beyond 0.1 %)")
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def plot_decomposition(chains: dict[str, Sequence[tuple[str, dict[str, float | None]]]],
                       datasets: Sequence[str], path: Path) -> Path:
    """One panel per mode: each link's latency over the chain's first (the paper's), a line
    per dataset, the links named along the bottom."""
    fig, axes = plt.subplots(1, len(chains), figsize=(4.2 * len(chains), 4.4), squeeze=False)
    for ax, (mode, chain) in zip(axes[0], chains.items(), strict=True):
        for k, dataset in enumerate(datasets):
            first = chain[0][1].get(dataset)
            ys = [v[dataset] / first if first and v.get(dataset) else float("nan")
                  for _, v in chain]
            ax.plot(range(len(chain)), ys, marker="o", ms=3,
                    color=("#4c72b0", "#dd8452", "#55a868", "#c44e52")[k % 4], label=dataset)
        ax.axhline(1.0, color="0.3", lw=0.8)
        ax.set_xticks(range(len(chain)))
        ax.set_xticklabels([f"{i}" for i in range(len(chain))], fontsize=7)
        ax.set_xlabel("link of the chain (the report's table)", fontsize=8)
        ax.set_ylabel("latency / the paper's", fontsize=8)
        ax.set_title(mode, fontsize=9)
        ax.legend(fontsize=7)
    return _save(fig, path)
