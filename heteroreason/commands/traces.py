#!/usr/bin/env python3
"""Reasoning traces: generate synthetic ones, import the artifact's, validate, summarize.

    heteroreason traces generate --dataset all --problems 100 --seed 1 --out build/traces
    heteroreason traces stats build/traces/*.jsonl
    heteroreason traces import --format artifact ../shared/data/.../with_bt --out t.jsonl
    heteroreason traces import --format token-log LOG.jsonl --dataset gsm8k \\
        --prompt-tokens 116 --out t.jsonl
    heteroreason traces validate t.jsonl

Bad input exits with status 2 and a message naming the file, line and field.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from heteroreason.commands.common import command_parser, run_staged
from heteroreason.model.experiments.report import format_table
from heteroreason.model.workload.trace_import import import_artifact_file, import_token_log
from heteroreason.model.workload.trace_synth import (
    MAX_GENERATED_PROBLEMS,
    PRM_CONTEXT_TOKENS,
    PROFILES,
    TraceStats,
    iter_traces,
    trace_stats,
)
from heteroreason.model.workload.traces import (
    BRSD_POLICY,
    RSD_POLICY,
    TraceError,
    dump_traces,
    load_traces,
)


def cmd_generate(args, stage: Path) -> int:
    """Each dataset's traces written as they are made into ``stage`` (moved into ``--out``
    once all are done: an error or a signal leaves no output)."""
    names = list(PROFILES) if args.dataset == "all" else [args.dataset]
    counts = {}
    for name in names:
        try:
            counts[name] = dump_traces(
                iter_traces(PROFILES[name], seed=args.seed, problems=args.problems,
                            max_context_tokens=args.max_context), stage / f"{name}.jsonl")
        except ValueError as exc:
            raise TraceError(f"dataset {name}", None, str(exc)) from None
    for name in names:
        print(f"wrote {counts[name]} problems to {args.out / f'{name}.jsonl'} (dataset {name}, "
              f"seed {args.seed})")
    return 0


def cmd_stats(args) -> int:
    rows, groups = [], {}
    for path in args.files:
        for trace in load_traces(path):
            groups.setdefault(trace.dataset, []).append(trace)
    for dataset, traces in groups.items():
        stats = trace_stats(traces, dataset)
        rows.append(stats.row())
        prof = PROFILES.get(dataset)
        if prof is not None and args.profile:
            rows.append([f"  profile {dataset}", "", f"{prof.steps_per_problem:.1f}",
                         f"{100 * prof.accept_share:.1f}", f"{100 * prof.rescue_share:.1f}",
                         f"{100 * prof.backtrack_share:.1f}",
                         f"{prof.backtracks_per_problem:.2f}",
                         f"{prof.draft_tokens_per_problem:.0f}",
                         f"{prof.draft_tokens_per_step:.0f}",
                         f"{prof.target_tokens_per_rescue:.0f}", "", f"{prof.prompt_tokens:.0f}"])
    print(format_table(TraceStats.COLUMNS, rows))
    return 0


def _artifact_files(inputs: list[Path]) -> list[Path]:
    def index(p: Path):
        match = re.search(r"(\d+)", p.stem)
        return (str(p.parent), int(match.group(1)) if match else -1, p.name)

    files = []
    for item in inputs:
        if item.is_dir():
            files.extend(sorted(item.rglob("*.json"), key=index))
        elif item.exists():
            files.append(item)
        else:
            raise TraceError(str(item), None, "does not exist")
    if not files:
        raise TraceError(", ".join(map(str, inputs)), None, "holds no .json trace files")
    return files


def cmd_import(args, stage: Path) -> int:
    policy = RSD_POLICY if args.policy == "rsd" else BRSD_POLICY
    if args.format == "artifact":
        traces = [import_artifact_file(f, dataset=args.dataset, prompt_tokens=args.prompt_tokens,
                                       policy=policy) for f in _artifact_files(args.inputs)]
    else:
        if args.dataset is None or args.prompt_tokens is None:
            raise TraceError("import", "--dataset/--prompt-tokens",
                             "token logs carry neither; give both")
        traces = []
        for path in args.inputs:
            got, skipped = import_token_log(path, dataset=args.dataset,
                                            prompt_tokens=args.prompt_tokens, policy=policy,
                                            skip_invalid=args.skip_invalid)
            traces.extend(got)
            for error in skipped:
                print(f"skipped: {error}", file=sys.stderr)
    by_dataset: dict[str, list] = {}
    for trace in traces:
        by_dataset.setdefault(trace.dataset, []).append(trace)
    for dataset, group in by_dataset.items():  # a file per dataset, moved once all are written
        count = dump_traces(group, stage / f"{dataset}.jsonl")
        print(f"imported {count} problems into {args.out / f'{dataset}.jsonl'}")
    return 0


def cmd_validate(args) -> int:
    for path in args.files:
        traces = load_traces(path)
        print(f"{path}: {len(traces)} problems, {sum(len(t.steps) for t in traces)} step "
              "events: valid")
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="synthetic traces from a dataset profile")
    g.add_argument("--dataset", required=True, choices=[*PROFILES, "all"],
                   help="the dataset profile (all: one file per dataset, in --out)")
    g.add_argument("--problems", type=int, default=None,
                   help="problems per dataset (default: the dataset's full size)")
    g.add_argument("--seed", type=int, required=True,
                   help="the generator's seed (the same seed gives the same bytes)")
    g.add_argument("--out", type=Path, required=True,
                   help="the output directory (a DATASET.jsonl file per dataset)")
    g.add_argument("--max-context", type=int, default=PRM_CONTEXT_TOKENS,
                   help="a problem ends before the first step whose context exceeds this "
                        f"(default {PRM_CONTEXT_TOKENS}: the PRM's)")
    s = sub.add_parser("stats", help="summarize trace files per dataset")
    s.add_argument("files", nargs="+", type=Path)
    s.add_argument("--no-profile", dest="profile", action="store_false",
                   help="do not print the dataset profile under each dataset")
    i = sub.add_parser("import", help="convert the paper artifact's traces")
    i.add_argument("--format", required=True, choices=["artifact", "token-log"],
                   help="the input's format: the artifact's example_*.json, or a token log")
    i.add_argument("inputs", nargs="+", type=Path, help="files or folders")
    i.add_argument("--out", required=True, type=Path,
                   help="the output directory (a DATASET.jsonl file per dataset)")
    i.add_argument("--dataset", default=None,
                   help="dataset name (artifact: default the folder's name)")
    i.add_argument("--prompt-tokens", type=int, default=None,
                   help="prompt length where the input has none (token logs, no_bt traces)")
    i.add_argument("--policy", choices=["brsd", "rsd"], default="brsd",
                   help="the policy the traces ran (brsd: with backtracking; rsd: without)")
    i.add_argument("--skip-invalid", action="store_true",
                   help="token logs: report and leave out inconsistent records")
    v = sub.add_parser("validate", help="check trace files")
    v.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if getattr(args, "problems", None) is not None and \
            not 1 <= args.problems <= MAX_GENERATED_PROBLEMS:
        parser.error(f"--problems must be an integer in [1, {MAX_GENERATED_PROBLEMS:,}], "
                     f"not {args.problems}")
    if getattr(args, "max_context", 1) < 1:
        parser.error(f"--max-context must be a positive integer, not {args.max_context}")
    if getattr(args, "seed", 0) < 0:
        parser.error(f"--seed must be a non-negative integer, not {args.seed}")
    if getattr(args, "prompt_tokens", None) is not None and args.prompt_tokens < 1:
        parser.error(f"--prompt-tokens must be a positive integer, not {args.prompt_tokens}")
    try:
        if args.command in ("generate", "import"):  # whole or absent; one writer at a time
            handler = cmd_generate if args.command == "generate" else cmd_import
            return run_staged(parser, args, argv, lambda args, argv, stage: handler(args, stage))
        return {"stats": cmd_stats, "validate": cmd_validate}[args.command](args)
    except TraceError as exc:
        print(f"heteroreason traces: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
