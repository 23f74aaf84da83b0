"""The reproduction of the paper's evaluation (Fig. 8/10): every configuration, dataset and mode,
with and without backtracking, compared with the paper's figures (docs/design.md §8)."""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from heteroreason.model.system.config import (
    CONFIGS,
    FPGA_MODELS,
    GPU_DRAFTS,
    ServingMode,
    SystemConfig,
    system_config,
)
from heteroreason.model.system.metrics import DatasetMetrics
from heteroreason.model.system.simulate import SimulationResult, simulate
from heteroreason.model.workload.bundled import BUNDLED_PROBLEMS, BUNDLED_SEED, load_bundled
from heteroreason.model.workload.trace_import import import_artifact_file
from heteroreason.model.workload.trace_synth import PROFILES, generate_traces
from heteroreason.model.workload.traces import RSD_POLICY, ProblemTrace, TraceError, load_traces

__all__ = ["DATASETS", "PAPER_LATENCY_S", "ReproRow", "load_trace_sets", "ordered_datasets",
           "reproduce",
           "synthetic_no_backtrack_sets", "write_rows"]

DATASETS = ("math500", "gsm8k", "gaokao2023en", "olympiadbench")

# Fig. 10, seconds per problem (docs/design.md §8): baseline, +T2, +T2+T1, and +T2+T1 without
# backtracking; Fig. 9: RSD on three GPUs (the artifact's
# Analysis/reference_results/figure_metrics.json, ``figure10`` and ``figure9``, rounded)
PAPER_LATENCY_S = {
    ("config1", "rsd", False): (9.63, 5.96, 10.74, 15.59),
    ("config2", "rsd", False): (9.80, 6.05, 9.37, 13.05),
    ("config1", "baseline", True): (11.66, 6.39, 12.15, 21.44),
    ("config1", "t2", True): (9.66, 4.33, 10.42, 17.66),
    ("config1", "heteroreason", True): (8.84, 2.36, 8.73, 15.48),
    ("config1", "heteroreason", False): (7.08, 2.20, 6.71, 11.51),
    ("config2", "baseline", True): (10.56, 7.16, 13.71, 17.94),
    ("config2", "t2", True): (8.75, 4.53, 8.71, 12.83),
    ("config2", "heteroreason", True): (8.87, 2.62, 9.05, 14.45),
    ("config2", "heteroreason", False): (6.63, 2.15, 6.46, 10.93),
}
# Fig. 8 energy, J/token (Config1): baseline and HeteroReason
PAPER_J_PER_TOKEN = {
    ("config1", "baseline", True): (6.86, 10.17, 7.18, 7.64),
    ("config1", "heteroreason", True): (4.57, 3.38, 4.49, 4.92),
}

# Table III, accuracy % per dataset (same order), on three GPUs in BF16: RSD, BRSD, and BRSD with
# the system's optimizations (the t2 and heteroreason modes run it); the artifact's
# Algorithm/reference_results/table3_accuracy_reference.json. A replay does not change a
# trace's answers: a mode's accuracy is its traces'
PAPER_ACCURACY_PCT = {
    ("config1", "rsd"): (62.8, 87.1, 54.3, 27.1),
    ("config1", "baseline"): (67.0, 88.9, 56.6, 29.3),
    ("config1", "t2"): (67.2, 88.9, 56.6, 29.9),
    ("config2", "rsd"): (44.2, 70.6, 51.4, 16.6),
    ("config2", "baseline"): (47.8, 78.2, 55.2, 21.0),
    ("config2", "t2"): (47.5, 77.6, 54.6, 20.9),
}

MODES_WITH_BT = (ServingMode.BASELINE, ServingMode.T2, ServingMode.HETEROREASON)
MODES_WITHOUT_BT = (ServingMode.RSD, ServingMode.T2, ServingMode.HETEROREASON)


@dataclass(frozen=True)
class ReproRow:
    config: str
    dataset: str
    backtracking: bool
    mode: str
    fpga: str  # the FPGA draft model (FPGA_MODELS); "" for the GPU-only modes
    gpu_draft: str  # the GPU draft model (GPU_DRAFTS)
    metrics: DatasetMetrics
    speedup: float  # the reference mode's latency over this row's, on the same traces
    speedup_vs: str  # the reference: baseline with backtracking, rsd without
    over_t2: float  # t2's latency over this row's, on the same traces
    paper_latency_s: float | None
    paper_j_per_token: float | None

    HEADER = ("config", "dataset", "bt", "mode", "fpga", "gpu draft", "latency s", "paper s",
              "diff %", "speedup", "vs", "x t2", "goodput tok/s", "throughput tok/s", "J/token",
              "paper J/token", "J/output token (dev)", "stall %", "stalled steps %", "comm %",
              "wasted energy %", "of it prefetch %", "accuracy %", "paper accuracy %")

    def cells(self) -> list[str]:
        m = self.metrics
        diff = ("" if self.paper_latency_s is None
                else f"{100 * (m.latency_s / self.paper_latency_s - 1):+.0f}")
        accuracy = "" if m.accuracy is None else f"{100 * m.accuracy:.1f}"
        return [self.config, self.dataset, "yes" if self.backtracking else "no", self.mode,
                self.fpga or "-", self.gpu_draft, f"{m.latency_s:.2f}",
                "" if self.paper_latency_s is None else f"{self.paper_latency_s:.2f}", diff,
                f"{self.speedup:.2f}", self.speedup_vs, f"{self.over_t2:.2f}",
                f"{m.goodput_tokens_s:.1f}", f"{m.throughput_tokens_s:.1f}",
                f"{m.j_per_token_system:.2f}",
                "" if self.paper_j_per_token is None else f"{self.paper_j_per_token:.2f}",
                f"{m.j_per_output_token_device:.2f}", f"{100 * m.stall_share:.1f}",
                f"{100 * m.stalled_step_share:.1f}", f"{100 * m.comm_share:.4f}",
                f"{100 * m.wasted_energy_share:.2f}",
                f"{100 * m.prefetch_energy_share:.2f}", accuracy,
                _paper_accuracy(self.config, self.mode, self.dataset)]


def _paper_accuracy(config: str, mode: str, dataset: str) -> str:
    values = PAPER_ACCURACY_PCT.get((config, "t2" if mode == "heteroreason" else mode))
    if values is None or dataset not in DATASETS:
        return ""
    return f"{values[DATASETS.index(dataset)]:.1f}"


def load_trace_sets(paths: Iterable[Path], *, prompt_tokens: int | None = None
                    ) -> dict[str, list[ProblemTrace]]:
    """Traces grouped by dataset, from project JSONL files or artifact folders/files."""
    sets: dict[str, list[ProblemTrace]] = {}
    for path in map(Path, paths):
        if path.is_dir():
            files = sorted(path.rglob("example_*.json"))
            if not files:
                raise TraceError(str(path), None, "holds no artifact example_*.json files")
            traces = [import_artifact_file(f, prompt_tokens=prompt_tokens) for f in files]
        elif path.suffix == ".json":
            traces = [import_artifact_file(path, prompt_tokens=prompt_tokens)]
        else:
            traces = load_traces(path)
        for trace in traces:
            sets.setdefault(trace.dataset, []).append(trace)
    return sets


def bundled_sets() -> dict[str, list[ProblemTrace]]:
    return {name: load_bundled(name) for name in DATASETS}


def synthetic_no_backtrack_sets() -> dict[str, list[ProblemTrace]]:
    """The bundled sets' companions without backtracking (same seed and size, RSD policy)."""
    return {name: generate_traces(PROFILES[name], seed=BUNDLED_SEED, problems=BUNDLED_PROBLEMS,
                                  policy=RSD_POLICY) for name in DATASETS}


def _paper(table, config, mode, bt, dataset):
    values = table.get((config, mode, bt))
    if values is None or dataset not in DATASETS:
        return None
    return values[DATASETS.index(dataset)]


# the problems whose timelines a reproduction keeps for its Gantt plot
PLOTTED_RUNS = 500


def ordered_datasets(sets: dict[str, list[ProblemTrace]]) -> list[str]:
    """The paper's datasets in its order, then any others by name."""
    return [d for d in DATASETS if d in sets] + sorted(set(sets) - set(DATASETS))


def check_companions(with_bt: dict[str, list[ProblemTrace]],
                     without_bt: dict[str, list[ProblemTrace]] | None) -> None:
    """Refuse traces without backtracking for a dataset that has none with it."""
    unmatched = sorted(set(without_bt or {}) - set(with_bt))
    if unmatched:
        raise ValueError(f"traces without backtracking for {', '.join(unmatched)} have no "
                         f"traces with backtracking to be compared with (those are for "
                         f"{', '.join(sorted(with_bt))})")


def reproduce(configs: Sequence[str], with_bt: dict[str, list[ProblemTrace]],
              without_bt: dict[str, list[ProblemTrace]] | None, *,
              fpgas: Sequence[str] = ("artifact",), gpu_draft: str = "measured",
              keep_runs_for: tuple[str, str] | None = None,
              ) -> tuple[list[ReproRow], dict[tuple, SimulationResult]]:
    """Every configuration, dataset and mode, ``heteroreason`` once per FPGA model of
    ``fpgas``; results keyed ``(config, dataset, backtracking, mode, fpga)`` (fpga ``""`` for
    the GPU-only modes). Timelines are kept only for the first :data:`PLOTTED_RUNS` problems
    of ``(config, dataset)`` of ``keep_runs_for`` (where the Gantt plot picks its problem);
    every other result keeps its per-problem metrics alone."""
    rows, results = [], {}
    check_companions(with_bt, without_bt)
    if not fpgas:
        raise ValueError("fpgas must name at least one FPGA model")
    ordered = ordered_datasets(with_bt)
    for config_name in configs:
        systems = {f: system_config(config_name, fpga=f, gpu_draft=gpu_draft) for f in fpgas}
        for dataset in ordered:
            plan = [(True, m, with_bt[dataset]) for m in MODES_WITH_BT]
            if without_bt and dataset in without_bt:
                plan += [(False, m, without_bt[dataset]) for m in MODES_WITHOUT_BT]
            reference: dict[bool, float] = {}  # the first mode of each plan: on its traces
            t2: dict[bool, float] = {}
            done = []
            for bt, mode, traces in plan:
                keep = PLOTTED_RUNS if keep_runs_for == (config_name, dataset) and bt else False
                for fpga in (fpgas if mode.on_fpga else ("",)):
                    result = simulate(traces, systems[fpga or fpgas[0]], mode, keep_runs=keep)
                    results[(config_name, dataset, bt, mode.value, fpga)] = result
                    reference.setdefault(bt, result.summary.latency_s)
                    if mode is ServingMode.T2:
                        t2[bt] = result.summary.latency_s
                    done.append((bt, mode, fpga, result))
            for bt, mode, fpga, result in done:
                latency = result.summary.latency_s
                paper = fpga in ("", "artifact")  # the paper's figures are the artifact's line's
                rows.append(ReproRow(
                    config_name, dataset, bt, mode.value, fpga, gpu_draft, result.summary,
                    reference[bt] / latency,
                    (MODES_WITH_BT if bt else MODES_WITHOUT_BT)[0].value,
                    t2[bt] / latency,
                    _paper(PAPER_LATENCY_S, config_name, mode.value, bt, dataset)
                    if paper else None,
                    _paper(PAPER_J_PER_TOKEN, config_name, mode.value, bt, dataset)
                    if paper else None))
    return rows, results


# what each GPU draft model is, for the options' help (the presets carry the full source)
GPU_DRAFT_HELP = {
    "measured": "fitted on the artifact's measured step profiles (RTX 3090)",
    "paper": "the paper's claimed 125 tok/s (RTX 3090)",
    "vllm-a100": "Qwen's published vLLM figure for Qwen2.5-0.5B-Instruct on an A100",
    "hf-a100": "Qwen's published Transformers figure for Qwen2.5-0.5B-Instruct on an A100",
}

SOURCES_HEADER = ("config", "role", "model", "figures", "source")


def config_sources(config: SystemConfig) -> list[tuple[str, str, str, str, str]]:
    """Every input of ``config`` with its figures and where they come from (a file and a
    method, or the paper's claim): one row per model, link and power figure."""
    rows = []
    for role, t in (("draft (GPU)", config.draft_gpu), ("draft (FPGA)", config.fpga),
                    ("PRM", config.prm), ("target", config.target)):
        floor = f" (at least {t.decode_floor_ms_per_token:g} ms/token)" \
            if t.decode_floor_ms_per_token else ""
        figures = (f"decode {t.decode_call_ms:g} ms/call + {t.decode_ms_per_token:g} ms/token "
                   f"+ {t.decode_ms_per_kv_token:g} ms/KV token{floor}; prefill "
                   f"{t.prefill_call_ms:g} ms/call + {t.prefill_ms_per_token:g} ms/token")
        rows.append((config.name, role, t.name, figures, t.source or "(none recorded)"))
    link = config.link
    rows.append((config.name, "link", link.name,
                 f"{link.bandwidth_bytes_per_s / 1e9:g} GB/s, {link.latency_ms:g} ms",
                 link.source or "(none recorded)"))
    for role, p in (("power: draft GPU", config.draft_gpu_power), ("power: PRM", config.prm_power),
                    ("power: target", config.target_power), ("power: FPGA", config.fpga_power)):
        rows.append((config.name, role, p.name, f"{p.active_w:g} W active, {p.idle_w:g} W idle",
                     p.source or "(none recorded)"))
    rows.append((config.name, "system power", "three GPUs / FPGA + two GPUs",
                 f"{config.three_gpu_system_w:g} W / {config.fpga_system_w:g} W",
                 "artifact's busy-average measurement (power_smoke_results.json); the FPGA "
                 "figure with the board's power swapped for another board's"))
    return rows


def write_sources(configs: Sequence[SystemConfig], out_dir: Path) -> Path:
    """``OUT/sources.csv``: :func:`config_sources` of every configuration."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "sources.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SOURCES_HEADER)
        for config in configs:
            writer.writerows(config_sources(config))
    return path


def write_rows(rows: Sequence[ReproRow], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "reproduction.csv"
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(ReproRow.HEADER)
        writer.writerows(r.cells() for r in rows)
    json_path = out_dir / "reproduction.json"
    json_path.write_text(json.dumps(
        [{"config": r.config, "dataset": r.dataset, "backtracking": r.backtracking,
          "mode": r.mode, "fpga": r.fpga or None, "gpu_draft": r.gpu_draft,
          "speedup": r.speedup, "speedup_vs": r.speedup_vs, "over_t2": r.over_t2,
          "paper_latency_s": r.paper_latency_s, "paper_j_per_token": r.paper_j_per_token,
          **asdict(r.metrics)} for r in rows], indent=1))
    return csv_path, json_path


def add_trace_set_options(parser: argparse.ArgumentParser, *, fpgas_help: str,
                          default_fpgas: Sequence[str]) -> None:
    """The options the reproduction and the break-even share: the traces with backtracking,
    the prompt length artifact traces lack, the configurations, the FPGA models and the GPU
    draft."""
    parser.add_argument("--traces", nargs="+", type=Path, default=None,
                        help="traces with backtracking: project JSONL files or artifact folders "
                             "(default: the bundled synthetic sets)")
    parser.add_argument("--prompt-tokens", type=int, default=None,
                        help="prompt length for artifact traces that lack one (default: none; "
                             "an artifact trace without one is refused)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS),
                        help="system configurations: config1 (0.5B draft, 7B PRM, 7B target), "
                             "config2 (1.5B target)")
    parser.add_argument("--fpgas", nargs="+", default=list(default_fpgas),
                        choices=list(FPGA_MODELS), metavar="FPGA",
                        help=f"{fpgas_help}; one of {', '.join(FPGA_MODELS)}")
    parser.add_argument("--gpu-draft", default="measured", choices=list(GPU_DRAFTS),
                        help="the GPU draft the GPU-only modes run: " + "; ".join(
                            f"{name}: {text}" for name, text in GPU_DRAFT_HELP.items()))


def check_trace_set_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit 2 (through ``parser``) on a bad value of :func:`add_trace_set_options`'s options."""
    if args.prompt_tokens is not None and args.prompt_tokens < 1:
        parser.error(f"--prompt-tokens must be a positive integer, not {args.prompt_tokens}")
