#!/usr/bin/env python3
"""Run the BRSD controller with the DraftEngine RTL (Verilator) as its draft, compare with the
integer reference as the draft, and replay the captured trace through the scheduler.

    heteroreason cosim --out build/cosim
    heteroreason cosim --count 3 --max-steps 6 --out build/cosim
    heteroreason cosim --contexts 2 --per-pass 2 --count 4 --out build/cosim

Prints per problem the outcomes, whether the RTL run equals the reference run token for token,
the host commands sent and the KVMU modes they led to, then the replay's latency per mode. With
--contexts N > 1 the MultiDraftEngine holds N problems at once, a controller a context, their
drafts sharing passes of the weights (--per-pass a pass); it also prints the context each
problem ran on and the tokens a pass. Exit status 1 when the runs differ, 2 on bad arguments.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from heteroreason.commands.common import command_parser, run_staged
from heteroreason.model.controller.brsd import ControllerConfig, ControllerError
from heteroreason.model.experiments.report import format_table
from heteroreason.model.system.simulate import simulate_file
from heteroreason.model.workload.traces import TraceError
from heteroreason.sim.verify.cosim import ENGINE_DEFAULTS, run_cosim, run_reference

# problems a run takes (each a Verilator run of the DraftEngine, seconds) and the length of
# their random prompts in tokens
MAX_COUNT = 64
PROMPT = 6
# contexts the MultiDraftEngine is built with on Verilator (a KVMU and an input MUX each)
MAX_CONTEXTS = 16


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
    parser.add_argument("--contexts", type=int, default=1,
                        help="problems the engine holds and runs at once (1: the DraftEngine; "
                             f"2 to {MAX_CONTEXTS}: the MultiDraftEngine)")
    parser.add_argument("--per-pass", type=int, default=None,
                        help="drafts the MultiDraftEngine runs a pass of its weights (2, 4 or 8, "
                             "at most --contexts; with --contexts > 1; default 2)")
    args = parser.parse_args(argv)
    if not 1 <= args.contexts <= MAX_CONTEXTS:
        parser.error(f"--contexts must be an integer in [1, {MAX_CONTEXTS}] (a KVMU and an input "
                     f"MUX each on Verilator), not {args.contexts}")
    if args.contexts == 1 and args.per_pass is not None:
        parser.error("--per-pass needs --contexts of 2 or more (one context drafts one token a "
                     "pass)")
    if args.per_pass is None:
        args.per_pass = 2
    if args.contexts > 1 and (args.per_pass not in (2, 4, 8) or args.per_pass > args.contexts):
        parser.error(f"--per-pass must be 2, 4 or 8 and at most --contexts ({args.contexts}), "
                     f"not {args.per_pass}")
    if not 1 <= args.count <= MAX_COUNT:
        parser.error(f"--count must be an integer in [1, {MAX_COUNT}] (problems on Verilator, "
                     f"seconds each), not {args.count}")
    if args.max_steps < 1 or args.max_step_tokens < 1:
        parser.error("--max-steps and --max-step-tokens must be positive")
    if not 1 <= len(args.delimiters) <= 2 or not all(2 <= d < 256 for d in args.delimiters):
        parser.error("--delimiters takes one or two ids in [2, 256)")
    budget = args.max_steps * args.max_step_tokens
    if PROMPT + budget > ENGINE_DEFAULTS["capacity"]:  # refused before the engine is built
        parser.error(f"a prompt of {PROMPT} tokens plus --max-steps x --max-step-tokens "
                     f"({args.max_steps} x {args.max_step_tokens} = {budget}) must fit the "
                     f"engine's KV capacity of {ENGINE_DEFAULTS['capacity']} tokens")
    # whole or absent (an error or a signal leaves no rtl.jsonl); one writer at a time
    return run_staged(parser, args, argv, lambda args, argv, stage: _run(args, stage))


def _run(args, stage: Path) -> int:
    preset, seed = "test-tiny", 1
    prompts = [[int(t) for t in np.random.default_rng(s).integers(2, 256, PROMPT)]
               for s in range(1, args.count + 1)]
    controller = ControllerConfig(
        delimiters=frozenset(args.delimiters), eos=1, max_step_tokens=args.max_step_tokens,
        max_total_tokens=args.max_step_tokens * args.max_steps, max_steps=args.max_steps)
    trace = stage / "rtl.jsonl"
    try:
        reference = run_reference(prompts, controller, preset=preset, seed=seed)
        start = time.monotonic()
        rtl = run_cosim(prompts, controller, preset=preset, seed=seed, trace_out=trace,
                        contexts=args.contexts, per_pass=args.per_pass)
    except (ControllerError, TraceError, ValueError) as exc:
        print(f"heteroreason cosim: error: {exc}", file=sys.stderr)
        return 2
    wall = time.monotonic() - start
    multi = args.contexts > 1
    ran_on = {i: int(k) for k, problems in rtl.get("contexts", {}).items() for i in problems}
    rows = []
    for i, (ref, got) in enumerate(zip(reference["traces"], rtl["traces"], strict=True)):
        rows.append([i, *([ran_on[i]] if multi else []),
                     " ".join(s["outcome"] for s in got["steps"]),
                     len(rtl["chains"][i]), "yes" if got == ref and
                     rtl["chains"][i] == reference["chains"][i] else "NO"])
    print(format_table(["problem", *(["context"] if multi else []), "outcomes (RTL draft)",
                        "chain tokens", "equal to the reference run"], rows))
    # a command is [cycle, command, pos, mode] (one context) or [cycle, context, command, pos,
    # mode] (several): its name is the one after the cycle and context
    name = 2 if multi else 1
    commands = Counter(c[name] for c in rtl["commands"])
    confirmed = sum(1 for c in rtl["commands"] if c[-1])
    print(f"host commands: {dict(commands)}; {confirmed} of {len(rtl['commands'])} confirmed by "
          f"the KVMU mode they led to; {rtl['drafts']} draft tokens checked against the "
          f"reference; {rtl['cycles']:,} cycles in {wall:.0f} s")
    if multi:
        print(f"{args.contexts} contexts, up to {args.per_pass} drafts a pass: "
              f"{rtl['tokens']:,} tokens in {rtl['passes']:,} passes of the weights "
              f"({rtl['tokens'] / rtl['passes']:.2f} a pass)")
    replay = []
    for mode in ("baseline", "t2", "heteroreason"):
        summary = simulate_file(trace, config="config1", mode=mode).summary
        replay.append([mode, f"{summary.latency_s:.3f}"])
    print(format_table(["mode (config1)", "latency s/problem"], replay))
    print(f"wrote {args.out / trace.name}")
    same = rtl["traces"] == reference["traces"] and rtl["chains"] == reference["chains"]
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
