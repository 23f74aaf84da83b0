#!/usr/bin/env python3
"""Run the BRSD controller with the DraftEngine RTL (Verilator) as its draft, compare with the
integer reference as the draft, and replay the captured trace through the scheduler.

    heteroreason cosim --out build/cosim
    heteroreason cosim --count 3 --max-steps 6 --out build/cosim

Prints per problem the outcomes, whether the RTL run equals the reference run token for token,
the host commands sent and the KVMU modes they led to, then the replay's latency per mode.
Exit status 1 when the runs differ, 2 on bad arguments.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from heteroreason.commands.common import command_parser
from heteroreason.model.controller.brsd import ControllerConfig
from heteroreason.model.experiments.report import format_table
from heteroreason.model.files import output_problem
from heteroreason.model.system.simulate import simulate_file
from heteroreason.sim.verify.cosim import run_cosim, run_reference


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--out", type=Path, required=True,
                        help="the output directory (the RTL run's trace: rtl.jsonl)")
    parser.add_argument("--count", type=int, default=2, help="random prompts (seeds 1..N)")
    parser.add_argument("--max-steps", type=int, default=4, help="steps a problem may take")
    parser.add_argument("--max-step-tokens", type=int, default=8,
                        help="tokens a step may take before it is cut")
    parser.add_argument("--delimiters", type=int, nargs="+", default=[16, 34],
                        help="one or two step-delimiter ids (the engine is built with them)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.max_steps < 1 or args.max_step_tokens < 1:
        parser.error("--count, --max-steps and --max-step-tokens must be positive")
    if not 1 <= len(args.delimiters) <= 2 or not all(2 <= d < 256 for d in args.delimiters):
        parser.error("--delimiters takes one or two ids in [2, 256)")
    problem = output_problem(args.out, folder=True)
    if problem:
        parser.error(f"--out: {problem}")
    preset, seed = "test-tiny", 1
    prompts = [[int(t) for t in np.random.default_rng(s).integers(2, 256, 6)]
               for s in range(1, args.count + 1)]
    controller = ControllerConfig(
        delimiters=frozenset(args.delimiters), eos=1, max_step_tokens=args.max_step_tokens,
        max_total_tokens=args.max_step_tokens * args.max_steps, max_steps=args.max_steps)
    reference = run_reference(prompts, controller, preset=preset, seed=seed)
    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    trace = args.out / "rtl.jsonl"
    rtl = run_cosim(prompts, controller, preset=preset, seed=seed, trace_out=trace)
    wall = time.monotonic() - start
    rows = []
    for i, (ref, got) in enumerate(zip(reference["traces"], rtl["traces"], strict=True)):
        rows.append([i, " ".join(s["outcome"] for s in got["steps"]),
                     len(rtl["chains"][i]), "yes" if got == ref and
                     rtl["chains"][i] == reference["chains"][i] else "NO"])
    print(format_table(["problem", "outcomes (RTL draft)", "chain tokens",
                        "equal to the reference run"], rows))
    commands = Counter(c[1] for c in rtl["commands"])
    confirmed = sum(1 for c in rtl["commands"] if c[3])
    print(f"host commands: {dict(commands)}; {confirmed} of {len(rtl['commands'])} confirmed by "
          f"the KVMU mode they led to; {rtl['drafts']} draft tokens checked against the "
          f"reference; {rtl['cycles']:,} cycles in {wall:.0f} s")
    replay = []
    for mode in ("baseline", "t2", "heteroreason"):
        summary = simulate_file(trace, config="config1", mode=mode).summary
        replay.append([mode, f"{summary.latency_s:.3f}"])
    print(format_table(["mode (config1)", "latency s/problem"], replay))
    print(f"wrote {trace}")
    same = rtl["traces"] == reference["traces"] and rtl["chains"] == reference["chains"]
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
