"""heteroreason: an open, cycle-approximate hardware model of HeteroReason (a draft LLM on an
FPGA, a process reward model and a target model on GPUs).

The handful of calls the README's examples use, each a thin, typed door into the library (the
packages below hold everything else: ``heteroreason.rtl``, ``heteroreason.sim``,
``heteroreason.model``)::

    import heteroreason as hr

    hr.draft_ms_per_token("u280-300", context=1024)        # the RTL-calibrated FPGA draft
    traces = hr.bundled_traces("gsm8k")                    # 100 synthetic problems
    hr.simulate(traces, "heteroreason", fpga="rtl-u280-300").latency_s
    hr.verdict(configs=["config1"])                        # the main job's rows
    hr.fleet(mode="heteroreason", pools=(2, 1, 1), rate_per_s=0.2, problems=50)
    hr.export_verilog("kvmu", "build/verilog", capacity=64)
    hr.run_bench("kvmu")                                   # a cocotb testbench, on Verilator

Names of configurations, modes, FPGA models, GPU drafts and boards are those of the command
line (``heteroreason --help``); a bad one raises ``ValueError`` or ``KeyError`` naming the
choices. Nothing heavy is imported until a call needs it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the records the calls return
    from heteroreason.model.experiments.verdict import VerdictRow
    from heteroreason.model.system.metrics import DatasetMetrics
    from heteroreason.model.workload.traces import ProblemTrace
    from heteroreason.sim.verify.runner import CocotbResult

__all__ = ["bundled_traces", "draft_ms_per_token", "export_verilog", "fleet", "load_traces",
           "run_bench", "simulate", "verdict"]


def _name(parameter: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{parameter} must be a name (str), not {value!r}")
    return value


def _names(parameter: str, value) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise ValueError(f"{parameter} must be a non-empty sequence of names, not {value!r}")
    return [_name(parameter, v) for v in value]


def _path(parameter: str, value) -> Path:
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{parameter} must be a path (str or os.PathLike), not {value!r}")
    return Path(value)


def draft_ms_per_token(board: str, *, model: str = "qwen2.5-0.5b", context: int = 0) -> float:
    """Milliseconds per decoded draft token of ``model`` on ``board`` (``u280-200``,
    ``u280-300``, ``v80``) after ``context`` tokens: the RTL-calibrated timing model of the
    design chosen for the board."""
    from heteroreason.model.timing.fpga.platform import draft_ms_per_token as price

    return price(_name("model", model), _name("board", board), context)


def bundled_traces(dataset: str) -> list[ProblemTrace]:
    """The bundled synthetic traces of ``dataset`` (``math500``, ``gsm8k``, ``gaokao2023en``,
    ``olympiadbench``: 100 problems each, with backtracking)."""
    from heteroreason.model.workload.bundled import load_bundled

    return load_bundled(_name("dataset", dataset))


def load_traces(path: str | Path) -> list[ProblemTrace]:
    """Traces from a project JSONL file, an artifact folder or an artifact ``example_*.json``
    file (every dataset in it, in file order)."""
    from heteroreason.model.experiments.reproduce import load_trace_sets

    return [t for traces in load_trace_sets([_path("path", path)]).values() for t in traces]


def simulate(traces: Sequence[ProblemTrace], mode: str, *, config: str = "config1",
             fpga: str | None = None, gpu_draft: str = "measured") -> DatasetMetrics:
    """The traces replayed in ``mode`` (``rsd``, ``baseline``, ``t2``, ``heteroreason``) on
    ``config`` with the FPGA model ``fpga`` (default: the artifact's U280 line) and the GPU
    draft ``gpu_draft``: the set's metrics (latency, goodput, J/token, waste, accuracy)."""
    from heteroreason.model.system.config import ServingMode, system_config
    from heteroreason.model.system.simulate import simulate as replay

    if isinstance(traces, str) or not isinstance(traces, Sequence):
        raise TypeError(f"traces must be a sequence of ProblemTrace, not {type(traces).__name__}")
    system = system_config(_name("config", config), fpga=fpga, gpu_draft=gpu_draft)
    return replay(list(traces), system, ServingMode.parse(mode), keep_runs=False).summary


def verdict(*, configs: Sequence[str] = ("config1", "config2"),
            gpu_draft: str = "measured") -> list[VerdictRow]:
    """The main job's verdict on the bundled traces: per configuration and dataset, the
    latency of ``baseline``, ``t2`` and HeteroReason with each FPGA model, and the break-even
    against ``t2``."""
    from heteroreason.model.experiments.reproduce import bundled_sets, reproduce
    from heteroreason.model.experiments.verdict import VERDICT_FPGAS, verdict_rows

    configs = _names("configs", configs)
    sets = bundled_sets()
    rows, _ = reproduce(configs, sets, None, fpgas=list(VERDICT_FPGAS),
                        gpu_draft=gpu_draft)
    return verdict_rows(rows, sets, gpu_draft=gpu_draft)


def fleet(*, config: str = "config1", mode: str = "heteroreason", fpga: str | None = None,
          pools: tuple[int, int, int] = (1, 1, 1), datasets: Sequence[str] = ("math500",),
          rate_per_s: float = 0.1, problems: int = 400, seed: int = 0,
          slo_s: float | None = None, contexts: int | None = None,
          per_pass: int | None = None) -> dict[str, Any]:
    """One fleet (``pools``: draft devices, PRM GPUs, target GPUs) at one load: problems of
    ``datasets`` arriving as a Poisson process of ``rate_per_s``; its record (latency
    percentiles, throughput, goodput, energy, SLO attainment). ``fpga`` None: this project's
    U280 design built for a pass of four, as the RTL builds it (its MultiDraftEngine: 16
    problems a board, up to four drafted a pass); ``contexts`` and ``per_pass`` (None: the
    design's): a board holding that many problems and drafting that many a pass (more
    problems than the design's is a what-if)."""
    from heteroreason.model.fleet.search import FLEET_FPGA, FleetPoint, evaluate

    if isinstance(pools, str) or not isinstance(pools, Sequence) or len(pools) != 3:
        raise ValueError(f"pools must be three pool sizes (drafts, PRMs, targets), not "
                         f"{pools!r}")
    drafts, prms, targets = pools
    return evaluate(FleetPoint(config=config, mode=mode, fpga=fpga or FLEET_FPGA,
                               drafts=drafts, prms=prms, targets=targets,
                               datasets=tuple(_names("datasets", datasets)),
                               rate_per_s=rate_per_s, problems=problems, seed=seed,
                               slo_s=slo_s, contexts=contexts, per_pass=per_pass))


def export_verilog(top: str, out_dir: str | Path, **params: int) -> Path:
    """``top`` (``kvmu``, ``decoder_core``, ``draft_engine``, ...: ``heteroreason export
    --help`` lists them) with ``params`` overriding its defaults, written as Verilog into
    ``out_dir``; the file's path."""
    from heteroreason.sim.flow.export import build_top, parse_params, write_verilog

    out = _path("out_dir", out_dir)  # before a block is built that would then go unused
    chosen = parse_params(top, [f"{k}={v}" for k, v in params.items()])
    return write_verilog(build_top(top, chosen), top, out)


def run_bench(top: str, *, events: int = 10_000, seed: int = 1, simulator: str | None = None,
              build_root: str | Path | None = None) -> CocotbResult:
    """The cocotb testbench of ``top`` (``kvmu``, ``multi_kvmu`` or ``kv_frontend``: directed
    tests, the paper's scenarios and ``events`` constrained-random events a traffic profile) on
    ``simulator`` (default: Verilator), built under ``build_root`` (default: the project's
    build cache, ``build/sim``); the counts of tests run and failed."""
    from heteroreason.commands.rtl_checks import BENCHES, MAX_EVENTS, MIN_EVENTS
    from heteroreason.model import checks
    from heteroreason.sim.verify.plan import Stimulus
    from heteroreason.sim.verify.runner import DEFAULT_BUILD_ROOT, run_cocotb

    benches = {name: (module, params) for name, module, params in BENCHES}
    if top not in benches:
        raise ValueError(f"no testbench for {top!r}; choose one of {', '.join(benches)}")
    checks.integer("events", events, low=MIN_EVENTS, high=MAX_EVENTS,
                   note="fewer random events miss the tests' coverage goals")
    checks.integer("seed", seed, low=0)
    module, params = benches[top]
    return run_cocotb(top, module, params=params, simulator=simulator, seed=seed,
                      stimulus=Stimulus(random_events=events),
                      build_root=DEFAULT_BUILD_ROOT if build_root is None
                      else _path("build_root", build_root))
