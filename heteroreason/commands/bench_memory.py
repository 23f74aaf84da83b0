#!/usr/bin/env python3
"""Benchmark memory where sizes are unbounded: generating a large trace set and reproducing it.

    heteroreason bench memory                       # 100,000 GSM8K problems (target < 500 MB)
    heteroreason bench memory --problems 20000 --dataset olympiadbench

Each stage runs as its own process, as a user would run it, and its peak resident memory is
read from the operating system when it exits (``wait4``'s ``ru_maxrss``): ``traces.py
generate`` (the generator writes as it goes), then ``reproduce.py`` on that file with
``--configs`` (every mode's replays keep their summaries, not their timelines). Prints each
stage's time, peak memory and memory per problem, and the target's verdict for the
reproduction (< 500 MB at 100,000 problems, the reliability issue's goal).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from heteroreason.commands.common import command_parser
from heteroreason.model.workload.trace_synth import MAX_GENERATED_PROBLEMS, PROFILES

TARGET_MB = 500.0
TARGET_PROBLEMS = 100_000


def run_stage(name: str, argv: list[str], problems: int) -> float:
    """Run ``argv``, print its time and peak memory; returns the peak in MB (10^6 bytes)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        # reaped by wait4 (for its usage): tell the Popen object, or it would wait again
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if code:
            sys.exit(f"bench_memory: {name} failed (exit {code}):\n{err.read().strip()}")
        last = out.read().strip().splitlines()[-1:] or [""]
    peak_mb = usage.ru_maxrss * 1024 / 1e6  # kibibytes on Linux
    print(f"{name}: {problems:,} problems in {seconds:.1f} s, peak memory {peak_mb:.0f} MB "
          f"({1e3 * peak_mb / problems:.2f} kB a problem)")
    print(f"  {last[0]}")
    return peak_mb


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--problems", type=int, default=TARGET_PROBLEMS,
                        help=f"problems to generate and reproduce (default {TARGET_PROBLEMS:,})")
    parser.add_argument("--dataset", choices=sorted(PROFILES), default="gsm8k",
                        help="the dataset profile generated")
    parser.add_argument("--configs", nargs="+", choices=["config1", "config2"],
                        default=["config1"], help='the configurations reproduced')
    parser.add_argument("--seed", type=int, default=1, help="the generator's seed")
    args = parser.parse_args(argv)
    if not 1 <= args.problems <= MAX_GENERATED_PROBLEMS:
        parser.error(f"--problems must be an integer in [1, {MAX_GENERATED_PROBLEMS:,}], not "
                     f"{args.problems}")
    if args.seed < 0:
        parser.error(f"--seed must be a non-negative integer, not {args.seed}")
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as tmp:
        traces = Path(tmp) / f"{args.dataset}.jsonl"
        run_stage("generate", [python, "-m", "heteroreason", "traces", "generate",
                               "--dataset", args.dataset, "--problems", str(args.problems),
                               "--seed", str(args.seed), "--out", tmp], args.problems)
        peak = run_stage("reproduce", [python, "-m", "heteroreason", "reproduce",
                                       "--traces", str(traces), "--configs", *args.configs,
                                       "--no-plots", "--out", str(Path(tmp) / "out")],
                         args.problems)
    if args.problems >= TARGET_PROBLEMS:
        verdict = "meets" if peak < TARGET_MB else "misses"
        print(f"target: a {args.problems:,}-problem reproduction in < {TARGET_MB:.0f} MB — "
              f"{verdict} it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
