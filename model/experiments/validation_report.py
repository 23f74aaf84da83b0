"""The sections of the validation report (``heteroreason validate``): level a, the scheduler
against the artifact simulator's schedule; level b, the GPU models against the artifact's step
profiles and the scheduler's baseline against its token logs; level c, the paper's figures
against this project's reproduction, factor by factor. Each section takes the artifact's folder
and the output folder, writes its CSV and plot, and returns its Markdown lines and files."""

from __future__ import annotations

import csv
from pathlib import Path

from heteroreason.model.experiments.artifact_semantics import (
    config_coefficients,
    read_artifact_config,
)
from heteroreason.model.experiments.decomposition import (
    decompose,
    read_simulator_reference,
    sample_statistics,
)
from heteroreason.model.experiments.plots import (
    plot_decomposition,
    plot_schedule_ladder,
    plot_validation,
)
from heteroreason.model.experiments.report import format_table
from heteroreason.model.experiments.reproduce import DATASETS as PAPER_DATASETS
from heteroreason.model.experiments.reproduce import bundled_sets
from heteroreason.model.experiments.validation import (
    ALIGNMENT_ORDER,
    ProblemCheck,
    ScheduleCheck,
    implied_draft_ms_per_token,
    median_abs_pct,
    profile_checks,
    schedule_checks,
    token_log_checks,
    token_log_replay,
)
from heteroreason.model.fleet.metrics import percentile
from heteroreason.model.timing.profile_fit import read_profile

__all__ = ["DATASETS", "GOALS", "PROFILES", "PROMPT_SWEEP", "SIMULATOR_CONFIG",
           "SIMULATOR_REFERENCE", "TOKEN_LOGS", "TRACES", "decomposition_section",
           "profile_section", "schedule_section", "token_log_section"]

TRACES = Path("Hardware/inputs/Config1/with_bt")
SIMULATOR_CONFIG = Path("Hardware/simulator/configs/config1.json")
SIMULATOR_REFERENCE = Path("Hardware/reference_results/simulator_reference.json")
FPGA_MODELS = ("rtl-u280-300",)  # the FPGA drafts level c ends the heteroreason chain with
PROFILES = Path("AE_hardware/inputs/step_profile_csv/config2")
TOKEN_LOGS = Path("AE_hardware/inputs/token_logs/weak_config2")
DATASETS = ("math500", "gsm8k", "aime", "olympiad")
# median |error| %, issue 15's goals
GOALS = {"schedule": 1.0, "profiles": 10.0, "token_log": 15.0}
PROMPT_SWEEP = (1, 30, 60, 116, 200)


def _dataset(path: Path) -> str:
    return next((d for d in DATASETS if d in path.name.lower()), path.stem.split(".")[0])


def _percentile(errors, q: float) -> float:
    """The ``q`` quantile of ``|errors|`` in %: the fleet's nearest-rank percentile, the one
    definition the project uses."""
    return 100 * percentile(sorted(abs(e) for e in errors), 100 * q)


def _write_csv(checks: list[ProblemCheck], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["source", "problem", "steps", "measured_ms", "model_ms", "error",
                    "cross_ms", "cross_error"])
        for c in checks:
            w.writerow([c.source, c.problem, c.steps, f"{c.measured_ms:.3f}",
                        f"{c.model_ms:.3f}", f"{c.error:.5f}",
                        "" if c.cross_ms is None else f"{c.cross_ms:.3f}",
                        "" if c.cross_error is None else f"{c.cross_error:.5f}"])
    return path


def _markdown_table(header, rows) -> list[str]:
    return ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(map(str, r)) + " |" for r in rows)]


def _write_schedule_csv(checks: list[ScheduleCheck], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["dataset", "problem", "events", "artifact_ms", "ours_ms", "difference",
                    "artifact_prompt_ms", "ours_prompt_ms",
                    *(f"aligned_{n}_ms" for n in ALIGNMENT_ORDER),
                    *(f"alone_{n}_ms" for n in ALIGNMENT_ORDER)])
        for c in checks:
            w.writerow([c.dataset, c.problem, c.events, f"{c.artifact_ms:.3f}",
                        f"{c.ours_ms:.3f}", f"{c.difference:.6f}",
                        f"{c.artifact_prompt_ms:.3f}", f"{c.ours_prompt_ms:.3f}",
                        *(f"{v:.3f}" for v in c.ladder_ms), *(f"{v:.3f}" for v in c.alone_ms)])
    return path


def _coefficient_rows(path: Path, config) -> list[list[str]]:
    _, params = read_artifact_config(path)
    ours = config_coefficients(config)
    rows = []
    for key, theirs in params.items():
        mine = ours.get(key)
        if mine is None:
            rows.append([key, f"{theirs:.10g}", "-", "not in this project's model"])
            continue
        rel = abs(mine - theirs) / max(abs(theirs), 1e-12)
        rows.append([key, f"{theirs:.10g}", f"{mine:.10g}",
                     "same" if rel == 0 else f"rounded (relative {rel:.1e})" if rel < 1e-4
                     else f"DIFFERS (relative {rel:.1e})"])
    return rows


def _largest_cause(check: ScheduleCheck) -> str:
    """The difference whose switch moves this problem's comparison the most."""
    diffs = (check.difference, *check.ladder_differences())
    k = max(range(len(ALIGNMENT_ORDER)), key=lambda i: abs(diffs[i + 1] - diffs[i]))
    return f"{ALIGNMENT_ORDER[k]} ({100 * (diffs[k] - diffs[k + 1]):+.2f})"


def schedule_section(folder: Path, config_file: Path, out: Path, config
                     ) -> tuple[list[str], list[Path]]:
    files = sorted(folder.glob("*/example_*.json"))
    if not files:
        return [f"Skipped: no execution traces in {folder}/<dataset>/example_<N>.json."], []
    checks = schedule_checks(files, config)
    aligned = median_abs_pct(c.difference for c in checks)
    both = median_abs_pct((c.ours_prompt_ms - c.artifact_prompt_ms) / c.artifact_prompt_ms
                          for c in checks)
    ladder = [["the artifact's schedule (prompt convention aligned)", f"{aligned:.2f}",
               f"{100 * max(abs(c.difference) for c in checks):.2f}",
               f"{sum(c.artifact_ms for c in checks) / 1e3:.1f}", "", ""]]
    rungs = [("artifact's schedule (prompt aligned)", [c.difference for c in checks])]
    artifact_total = sum(c.artifact_ms for c in checks)
    for k, name in enumerate(ALIGNMENT_ORDER):
        diffs = [c.ladder_differences()[k] for c in checks]
        alone = [(c.alone_ms[k] - c.artifact_ms) / c.artifact_ms for c in checks]
        ladder.append([f"+ {name}", f"{median_abs_pct(diffs):.2f}",
                       f"{100 * max(abs(d) for d in diffs):.2f}",
                       f"{sum(c.ladder_ms[k] for c in checks) / 1e3:.1f}",
                       f"{100 * (sum(c.alone_ms[k] for c in checks) / artifact_total - 1):+.2f}",
                       sum(abs(a) > 1e-4 for a in alone)])
        rungs.append((f"+ {name}", diffs))
    header = ["schedule compared with", "median abs. difference %", "max abs. difference %",
              "its total s", "alone: effect on the total %", "alone: problems it moves > 0.01 %"]
    verdict = "met" if aligned <= GOALS["schedule"] else "NOT met"
    ours_total = sum(c.ours_ms for c in checks)
    print(f"level a: {len(checks)} traces, heteroreason on {config.name} against the artifact's "
          f"schedule, prompt convention aligned: median |difference| {aligned:.2f} % (goal <= "
          f"{GOALS['schedule']:g} %: {verdict}); both with the prompt in the contexts "
          f"{both:.2f} %")
    print(format_table(header, ladder))
    worst = sorted(checks, key=lambda c: -abs(c.difference))[:10]
    worst_rows = [[c.dataset, c.problem, c.events, f"{c.artifact_ms / 1e3:.3f}",
                   f"{c.ours_ms / 1e3:.3f}", f"{100 * c.difference:+.2f}",
                   _largest_cause(c), f"{100 * c.ladder_differences()[-1]:+.4f}"]
                  for c in worst]
    lines = [f"Traces: the artifact's {len(checks)} Config1 execution traces ({folder}), the "
             f"same files for both. The artifact simulator's schedule "
             f"(`v12_rescue_serial_then_parallel`, the semantics its Config1 uses) is restated "
             f"in `model/experiments/artifact_semantics.py` from its public code; both run "
             f"on {config.name}'s coefficients with the artifact's U280 draft, which are the "
             f"artifact's own ({config_file.name}):", "",
             *(_markdown_table(["parameter", "artifact", config.name, ""],
                               _coefficient_rows(config_file, config))
               if config_file.is_file() else [f"({config_file} not found: not compared)"]),
             "",
             f"This project's `heteroreason` replay with the artifact's convention (contexts "
             f"hold the chain alone, `SystemConfig.prompt_in_contexts = False`) against the "
             f"artifact's schedule: median absolute difference per problem **{aligned:.2f} %** "
             f"(goal <= {GOALS['schedule']:g} %: {verdict}; set total {ours_total / 1e3:.1f} s "
             f"against {artifact_total / 1e3:.1f} s). With the prompt in every context on "
             f"both sides: {both:.2f} %. Every remaining difference, named and switched to this "
             f"project's semantics one after another (`Alignment` in that module; each row "
             f"compares the replay with the schedule so far; *alone*: the switch's effect on "
             f"the artifact's schedule by itself):", "",
             *_markdown_table(header, ladder), "",
             "The ten largest differences with the conventions aligned, the difference that "
             "accounts for most of each (the points of the difference it explains) and what "
             "is left once every difference is switched:", "",
             *_markdown_table(["dataset", "problem", "events", "artifact s", "ours s",
                               "difference %", "largest cause (points)", "all aligned %"],
                              worst_rows)]
    written = [_write_schedule_csv(checks, out / "schedule_checks.csv"),
               plot_schedule_ladder(rungs, out / "validation_schedule.png",
                                    title="heteroreason against the artifact's schedule")]
    return lines, written


def decomposition_section(folder: Path, reference_file: Path, out: Path
                          ) -> tuple[list[str], list[Path]]:
    files = sorted(folder.glob("*/example_*.json"))
    if not files or not reference_file.is_file():
        return [f"Skipped: level c needs the execution traces in {folder} and the artifact "
                f"simulator's results {reference_file}."], []
    reference = read_simulator_reference(reference_file)
    links = decompose(files, reference, bundled_sets(), fpga_models=FPGA_MODELS)
    lines, chains, csv_rows = [], {}, []
    for mode in dict.fromkeys(link.mode for link in links):
        chain = [link for link in links if link.mode == mode]
        chains[mode] = [(link.name, dict(link.latency_s)) for link in chain]
        rows = []
        for k, link in enumerate(chain):
            cells = []
            for d in PAPER_DATASETS:
                value = link.latency_s.get(d)
                factor = link.factor(chain[k - 1], d) if k else None
                cells.append("-" if value is None else f"{value:.2f}" +
                             ("" if factor is None else f" (x{factor:.3f})"))
                csv_rows.append([mode, k, link.name, link.kind, d,
                                 "" if value is None else f"{value:.4f}",
                                 "" if factor is None else f"{factor:.5f}"])
            rows.append([k, link.name, link.kind, *cells])
        header = ["", f"{mode}: each link swaps one input of the one above", "figure from",
                  *(f"{d} s (factor)" for d in PAPER_DATASETS)]
        print(format_table(header, rows))
        lines += [*_markdown_table(header, rows), ""]
    stats = sample_statistics(files, reference)
    stat_rows = [[d, f"{t:.0f}", f"{ft:.0f}", f"{t / ft:.2f}", f"{e:.1f}", f"{fe:.1f}"]
                 for d, (t, e, ft, fe) in stats.items()]
    odd, ratio = max(((d, t / ft) for d, (t, _, ft, _) in stats.items()),
                     key=lambda item: abs(item[1] - 1))
    path = out / "decomposition.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["mode", "link", "name", "kind", "dataset", "latency_s", "factor"])
        w.writerows(csv_rows)
    intro = [
        "Config1, the only configuration whose traces are public; mean seconds per problem, "
        "each link's factor over the link above it. *paper*: the paper's figure; *artifact*: "
        "the artifact simulator's own output; *model*: this project's. The artifact's "
        "simulator models HeteroReason alone: the GPU modes' chains go from the paper's "
        "figure to this scheduler directly.", "",
        "* paper -> the artifact's simulator on its full sets: not explained by anything "
        "public. Its figure notes (`figure_metrics.json`) say the paper's HeteroReason figures "
        "came from the simulator's older `v11` semantics on *runtime target critical-token "
        "traces*, which the artifact does not publish; its `v12` schedule on the published "
        "full sets is 25-43 % slower.",
        f"* full sets -> the public samples ({len(files)}): the samples are not the full "
        f"sets' average (draft tokens per problem below; {odd}'s samples draft "
        f"{100 * abs(ratio - 1):.0f} % {'more' if ratio > 1 else 'less'} than its full set).",
        "* the artifact's schedule -> this scheduler: level a (the differences named there).",
        "* the prompt in every context: this project's convention (every PRM call scores the "
        "prompt again; the target prefills it).",
        "* the samples -> the bundled synthetic traces: 100 problems a dataset drawn by the "
        "generator to the full sets' statistics in this project's step semantics "
        "(`trace_synth.PROFILES`, converted from `simulator_reference.json`), where the "
        "samples are 30 problems of their own.",
        "* the paper's GPU draft (8.0 ms/token, a claim) -> the draft measured on the "
        "artifact's step profiles (4.48 ms/token + 3.6 ms/call).", ""]
    lines = [*intro, *lines,
             "What the samples' link swaps, per problem (the full sets' figures from "
             "`simulator_reference.json`):", "",
             *_markdown_table(["dataset", "draft tokens, samples", "full set", "ratio",
                               "events, samples", "full set"], stat_rows)]
    written = [path, plot_decomposition(chains, PAPER_DATASETS, out / "validation_factors.png")]
    return lines, written


def profile_section(folder: Path, out: Path, config) -> tuple[list[str], list[Path]]:
    files = sorted(folder.glob("*.csv"))
    if len(files) < 2:
        return ([f"Skipped: the step profiles' check needs the profiles of two datasets in "
                 f"{folder} ({len(files)} found)."], [])
    profiles = {_dataset(f): read_profile(f) for f in files}
    presets = {"draft": config.draft_gpu, "prm": config.prm, "target": config.target}
    checks = profile_checks(profiles, presets)
    rows, groups = [], {}
    for name in sorted(profiles):
        cs = [c for c in checks if c.source == name]
        cross = median_abs_pct(c.cross_error for c in cs)
        rows.append([name, len(cs), f"{median_abs_pct(c.error for c in cs):.1f}",
                     f"{_percentile([c.error for c in cs], 0.9):.1f}", f"{cross:.1f}",
                     "met" if cross <= GOALS["profiles"] else "NOT met"])
        groups[name] = [(c.measured_ms / 1e3, c.cross_ms / 1e3) for c in cs]
    header = ["dataset", "problems", "median abs. error % (presets)", "P90 abs. error %",
              "median abs. error % (cross-validated)", f"goal <= {GOALS['profiles']:g} %"]
    print(format_table(header, rows))
    lines = [f"Profiles: {', '.join(f.name for f in files)}. Each problem's measured latency "
             f"is the sum of its rows' draft, PRM and target latencies; the model's, the same "
             f"sum of the presets' forms ({config.draft_gpu.name}, {config.prm.name}, "
             f"{config.target.name}) on the rows' calls and tokens; cross-validated: the "
             f"coefficients refitted on the other dataset's rows alone.", "",
             *_markdown_table(header, rows)]
    written = [_write_csv(checks, out / "profile_checks.csv"),
               plot_validation(groups, out / "validation_profiles.png",
                               title="step profiles: cross-validated model per problem")]
    return lines, written


def token_log_section(folder: Path, out: Path, config, prompt_tokens: int
                      ) -> tuple[list[str], list[Path]]:
    logs = sorted(folder.glob("*.jsonl"))
    if not logs:
        return [f"Skipped: no token logs in {folder}."], []
    lines, written, every = [], [], []
    for log in logs:
        dataset = _dataset(log)
        checks, runs = token_log_replay(log, config, dataset=dataset,
                                        prompt_tokens=prompt_tokens)
        every += checks
        error = median_abs_pct(c.error for c in checks)
        rows = [[c.problem, c.steps, f"{c.measured_ms / 1e3:.3f}", f"{c.model_ms / 1e3:.3f}",
                 f"{100 * c.error:+.1f}"] for c in checks]
        header = ["problem", "steps", "measured s", "baseline s", "error %"]
        print(f"{log.name}: baseline on {config.name}, prompt {prompt_tokens} tokens: median "
              f"|error| {error:.1f} % (goal <= {GOALS['token_log']:g} %)")
        print(format_table(header, rows))
        sweep = []
        for p in PROMPT_SWEEP:
            swept = token_log_checks(log, config, dataset=dataset, prompt_tokens=p)
            sweep.append([p, f"{median_abs_pct(c.error for c in swept):.1f}",
                          sum(c.error > 0 for c in swept)])
        accept_only = [all(s.outcome.value == "accept" for s in run.trace.steps)
                       for run in runs]
        implied = [[c.problem, f"{implied_draft_ms_per_token(c, config, run):.2f}"]
                   for c, run, only in zip(checks, runs, accept_only, strict=True) if only]
        split = []
        for kind, want in (("draft and PRM only (every step accepted)", True),
                           ("with the target's work", False)):
            errors = [c.error for c, o in zip(checks, accept_only, strict=True) if o == want]
            if errors:
                split.append([kind, len(errors), f"{median_abs_pct(errors):.1f}"])
        verdict = "met" if error <= GOALS["token_log"] else "NOT met"
        lines += [f"`{log.name}` ({dataset}, {len(checks)} records): the scheduler's `baseline` "
                  f"on {config.name} against each record's wall-clock `latency`, the prompt "
                  f"taken as {prompt_tokens} tokens: median absolute error **{error:.1f} %** (goal "
                  f"<= {GOALS['token_log']:g} %: {verdict}).",
                  "", *_markdown_table(header, rows), "",
                  "The logs do not record the prompt's length, which every PRM call scores "
                  "again; the error against the length assumed:", "",
                  *_markdown_table(["prompt tokens", "median abs. error %",
                                    "problems over-predicted"], sweep), "",
                  "The error by the work a record did (the jobs whose models it tests):", "",
                  *_markdown_table(["records", "count", "median abs. error %"], split), "",
                  f"The draft's speed each accept-only record implies (its measured latency "
                  f"less everything else as the models price it, over its draft tokens), "
                  f"against the {config.draft_gpu.decode_ms_per_token:g} ms/token the step "
                  f"profiles measure for the same draft ({config.draft_gpu.name}):", "",
                  *_markdown_table(["problem", "implied draft ms/token"], implied), ""]
    written.append(_write_csv(every, out / "token_log_checks.csv"))
    written.append(plot_validation(
        {"token logs": [(c.measured_ms / 1e3, c.model_ms / 1e3) for c in every]},
        out / "validation_token_log.png", title="token logs: baseline per problem"))
    return lines, written
