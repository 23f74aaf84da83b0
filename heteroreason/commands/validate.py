#!/usr/bin/env python3
"""The validation report: the system model against measurement, per problem.

    heteroreason validate                          # the artifact's data in ../shared
    heteroreason validate --artifact DIR --out build/validate --prompt-tokens 116

Level a of the report (the scheduler against the artifact simulator's schedule, restated in
model/experiments/artifact_semantics.py, on the artifact's own Config1 execution traces and
coefficients): per problem, with the prompt's convention aligned, then with each remaining
difference switched to this project's semantics in turn until none is left.

Level c (the paper's latencies against this project's reproduction, Config1): a chain of
latencies per mode, each link swapping one input (the artifact's simulator on its full sets,
its public samples, this scheduler, the prompt's convention, the bundled traces, the GPU draft,
the FPGA draft), so that each factor of the gap is measured by itself.

Level b of the report (the model against measurement): the GPU presets against the per-problem
sums of the artifact's step profiles (with the presets, fitted on every dataset, and
cross-validated, refitted on the other datasets alone), and the scheduler's ``baseline``
against the wall-clock latency of the artifact's token logs (with the sensitivity to the prompt
length those logs do not record). Writes OUT/validation.md, a CSV of every problem of each
check and a plot of each. What the artifact's folder lacks is skipped and said so; with no
data at all the program says what it looked for and exits 2, as on bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path

from heteroreason.commands.common import command_parser, run_staged
from heteroreason.model.experiments.validation_report import (
    PROFILES,
    SIMULATOR_CONFIG,
    SIMULATOR_REFERENCE,
    TOKEN_LOGS,
    TRACES,
    decomposition_section,
    profile_section,
    schedule_section,
    token_log_section,
)
from heteroreason.model.files import InputError
from heteroreason.model.system.config import system_config
from heteroreason.model.timing.profile_fit import ProfileError
from heteroreason.model.workload.traces import TraceError

DEFAULT_ARTIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / \
    "heteroreason-artifact"
def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--artifact", type=Path, default=DEFAULT_ARTIFACT,
                        help="the artifact's folder (default: ../shared/data/"
                             "heteroreason-artifact)")
    parser.add_argument("--out", type=Path, default=Path("build/validate"),
                        help="the output directory")
    parser.add_argument("--config", default="config2",
                        help="the configuration the artifact's profiles and logs ran "
                             "(default config2)")
    parser.add_argument("--prompt-tokens", type=int, default=116,
                        help="the prompt length of the token logs' problems (default 116)")
    args = parser.parse_args(argv)
    if args.prompt_tokens < 1:
        parser.error(f"--prompt-tokens must be a positive integer, not {args.prompt_tokens}")
    try:
        config = system_config(args.config)
    except ValueError as exc:
        parser.error(f"--config: {exc}")
    traces = args.artifact / TRACES
    profiles, logs = args.artifact / PROFILES, args.artifact / TOKEN_LOGS
    if not traces.is_dir() and not profiles.is_dir() and not logs.is_dir():
        print(f"heteroreason validate: error: no artifact data: none of {traces}, {profiles}, "
              f"{logs} exists (--artifact names the artifact's folder)", file=sys.stderr)
        return 2
    # whole or absent (an error leaves no file); one writer at a time
    return run_staged(parser, args, argv, lambda args, argv, stage: _write_report(
        args, traces, profiles, logs, config, stage))


def _write_report(args, traces, profiles, logs, config, stage) -> int:
    """The report's sections, written into ``stage``."""
    try:
        s_lines, s_files = schedule_section(traces, args.artifact / SIMULATOR_CONFIG, stage,
                                            system_config("config1"))
        c_lines, c_files = decomposition_section(traces, args.artifact / SIMULATOR_REFERENCE,
                                                 stage)
        p_lines, p_files = profile_section(profiles, stage, config)
        t_lines, t_files = token_log_section(logs, stage, config, args.prompt_tokens)
    except (InputError, ProfileError, TraceError, ValueError) as exc:
        print(f"heteroreason validate: error: {exc}", file=sys.stderr)
        return 2
    if not (s_files or c_files or p_files or t_files):  # a report of skips only is no report
        print(f"heteroreason validate: error: {args.artifact} holds none of the data any "
              f"section checks: " + " ".join(s_lines[:1] + c_lines[:1] + p_lines[:1]
                                             + t_lines[:1]), file=sys.stderr)
        return 2
    report = ["# Validation report", "",
              "Level a: the scheduler against the artifact simulator's schedule on identical "
              "traces. Level b: the model against measurement (the artifact's own "
              "measurements, per problem). Level c: the paper's figures against this "
              "project's reproduction, factor by factor.", "",
              "## Level a: the artifact's schedule on identical traces", "", *s_lines, "",
              "## Step profiles: the GPU models", "", *p_lines, "",
              "## Token logs: the scheduler's baseline", "", *t_lines, "",
              "## Level c: the paper's figures, factor by factor", "", *c_lines]
    path = stage / "validation.md"
    path.write_text("\n".join(report) + "\n")
    written = [path, *s_files, *p_files, *t_files, *c_files]
    print("wrote " + ", ".join(str(args.out / Path(p).relative_to(stage)) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
