#!/usr/bin/env python3
"""Run prompts through the BRSD controller with the numpy reference models, capture the traces,
and replay them through the system scheduler.

    heteroreason brsd --out build/brsd              # 4 seeded random prompts
    heteroreason brsd --prompts prompts.jsonl --out build/brsd
    (a prompt file holds one {"id": ..., "tokens": [...]} object a line)

The draft is the integer W8A8 model, the target a float model, the PRM a reward head over a
third float model (all random, seeded: no downloads). Bad input exits with status 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from heteroreason.commands.common import command_parser, run_staged
from heteroreason.model.controller.brsd import (
    ControllerConfig,
    ControllerError,
    ReferenceGenerator,
    RewardHeadScorer,
    run_problems,
)
from heteroreason.model.experiments.report import format_table
from heteroreason.model.spec.numerics.qwen2_config import PRESETS, qwen2_config
from heteroreason.model.spec.numerics.qwen2_float import FloatDecoder, random_weights
from heteroreason.model.spec.numerics.qwen2_int8 import IntDecoder, activation_scales, quantize
from heteroreason.model.system.config import ServingMode
from heteroreason.model.system.simulate import simulate
from heteroreason.model.workload.traces import TraceError, read_json_lines

# random prompts a run takes (each runs the draft, the PRM and the target, numpy models, for
# about 1-3 s on test-tiny: 100 end in minutes), and their length in tokens
MAX_COUNT = 100
RANDOM_PROMPT = 16


def read_prompts(path: Path, vocab: int) -> list[tuple[str, list[int]]]:
    prompts = []
    for where, obj in read_json_lines(path):
        if not isinstance(obj, dict) or "tokens" not in obj:
            raise TraceError(where, "tokens", "a prompt line is an object with 'tokens'")
        tokens = obj["tokens"]
        if not isinstance(tokens, list) or not tokens or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab
                for t in tokens):
            raise TraceError(where, "tokens", f"must be a non-empty list of ids in [0, {vocab})",
                             tokens)
        prompts.append((str(obj.get("id", len(prompts))), tokens))
    if not prompts:
        raise TraceError(str(path), None, "holds no prompts")
    return prompts


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--prompts", type=Path, default=None,
                        help="a JSONL file of prompts (default: the bundled arithmetic prompts)")
    parser.add_argument("--count", type=int, default=4, help="random prompts without --prompts")
    parser.add_argument("--preset", default="test-tiny",
                        choices=[n for n in PRESETS if n.startswith("test")],
                        help="the model preset run as draft, PRM and target")
    parser.add_argument("--seed", type=int, default=1, help="seed of the models' random weights")
    parser.add_argument("--out", type=Path, required=True,
                        help="the output directory (the captured traces: traces.jsonl)")
    parser.add_argument("--no-backtracking", action="store_true", help='run RSD: no backtracking')
    parser.add_argument("--max-step-tokens", type=int, default=24,
                        help="tokens a step may take before it is cut")
    parser.add_argument("--max-steps", type=int, default=16, help='steps a problem may take')
    args = parser.parse_args(argv)
    if not 1 <= args.count <= MAX_COUNT:
        parser.error(f"--count must be an integer in [1, {MAX_COUNT}] (random prompts; each "
                     f"runs three numpy models for seconds), not {args.count}")
    if args.max_step_tokens < 1 or args.max_steps < 1 or args.seed < 0:
        parser.error("--max-step-tokens and --max-steps must be positive, --seed non-negative")
    config = qwen2_config(args.preset)
    try:
        if args.prompts is not None:
            prompts = read_prompts(args.prompts, config.vocab)
        else:
            rng = np.random.default_rng(args.seed)
            prompts = [(str(i), [int(t) for t in rng.integers(2, config.vocab, RANDOM_PROMPT)])
                       for i in range(args.count)]
    except TraceError as exc:
        print(f"heteroreason brsd: error: {exc}", file=sys.stderr)
        return 2
    longest = max(len(tokens) for _, tokens in prompts)
    budget = args.max_step_tokens * args.max_steps
    if longest + budget > config.max_context:  # found before any model runs, not mid-problem
        parser.error(f"a prompt of {longest} tokens plus --max-steps x --max-step-tokens "
                     f"({args.max_steps} x {args.max_step_tokens} = {budget}) must fit "
                     f"{args.preset}'s context of {config.max_context} tokens")
    # whole or absent (an error or a signal leaves no traces.jsonl); one writer at a time
    return run_staged(parser, args, argv,
                      lambda args, argv, stage: _run(args, config, prompts, stage))


def _run(args, config, prompts, stage: Path) -> int:
    try:
        draft_weights = random_weights(config, seed=args.seed)
        draft = ReferenceGenerator(
            "draft", IntDecoder(quantize(draft_weights, activation_scales(draft_weights))))
        target = ReferenceGenerator("target", FloatDecoder(random_weights(config,
                                                                          seed=args.seed + 1)))
        prm = RewardHeadScorer("prm", FloatDecoder(random_weights(config, seed=args.seed + 2)),
                               seed=args.seed + 3)
        controller = ControllerConfig(
            delimiters=frozenset(range(16, config.vocab, 16)), eos=1,
            backtracking=not args.no_backtracking, max_step_tokens=args.max_step_tokens,
            max_total_tokens=args.max_step_tokens * args.max_steps, max_steps=args.max_steps)
        traces = run_problems(prompts, stage / "traces.jsonl", draft=draft, target=target,
                              prm=prm, config=controller, dataset=args.preset)
    except (TraceError, ControllerError, ValueError) as exc:
        print(f"heteroreason brsd: error: {exc}", file=sys.stderr)
        return 2
    rows = [[t.problem_id, len(t.steps), sum(s.outcome == "accept" for s in t.steps),
             sum(s.outcome == "rescue" for s in t.steps), t.backtracks, t.output_tokens]
            for t in traces]
    print(format_table(["problem", "steps", "accepted", "rescued", "backtracks",
                        "output tokens"], rows))
    modes = [ServingMode.BASELINE, ServingMode.T2, ServingMode.HETEROREASON] \
        if not args.no_backtracking else \
        [ServingMode.RSD, ServingMode.T2, ServingMode.HETEROREASON]
    replay = [[m.value, f"{simulate(traces, 'config1', m).summary.latency_s:.3f}"]
              for m in modes]
    print(format_table(["mode (config1 costs)", "latency s/problem"], replay))
    print(f"wrote {len(traces)} traces to {args.out / 'traces.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
