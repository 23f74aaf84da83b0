#!/usr/bin/env python3
"""Cycles per decoded token of the decoder core (Amaranth simulator) against the weight-stream
ideal, at chosen context lengths and parallelism.

    python scripts/bench_decoder.py --lanes 8 16 --context 16 512

The ideal is ``weight beats per sampled token`` (one beat per cycle); utilization = ideal /
measured. The KV cache holds whatever is there (timing does not depend on its values).
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from amaranth.sim import Simulator

from heteroreason.model.qwen2_config import PRESETS, qwen2_config
from heteroreason.model.qwen2_float import random_weights
from heteroreason.model.qwen2_int8 import calibrate, quantize
from heteroreason.model.report import format_table
from heteroreason.rtl.decoder_core import DecoderCore
from heteroreason.sim.hbm_model import hbm_processes


def cycles_per_token(model, lanes: int, position: int) -> tuple[int, int]:
    core = DecoderCore(model=model, lanes=lanes, delimiters=(), eos=0)
    result = {}

    async def host(ctx):
        ctx.set(core.token.payload.token, 5)
        ctx.set(core.token.payload.pos, position)
        ctx.set(core.token.payload.keep, 1)
        ctx.set(core.token.valid, 1)
        await ctx.tick().until(core.token.ready)
        ctx.set(core.token.valid, 0)
        ctx.set(core.sample.ready, 1)
        for cycles in range(1, 10_000_000):
            _, _, valid = await ctx.tick().sample(core.sample.valid)
            if valid:
                result["cycles"] = cycles
                return

    sim = Simulator(core)
    sim.add_clock(1e-8)
    for process in hbm_processes(core, core.schedule, rng=random.Random(0)):
        sim.add_process(process)
    sim.add_testbench(host)
    sim.run()
    return result["cycles"], core.schedule.weight_beats_per_token(keep_logits=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="test-tiny",
                        choices=[n for n in PRESETS if n.startswith("test")])
    parser.add_argument("--lanes", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--context", type=int, nargs="+", default=[16, 512])
    args = parser.parse_args(argv)
    config = qwen2_config(args.preset)
    bad = [c for c in args.context if not 0 <= c < config.max_context]
    if bad:
        parser.error(f"--context must be in [0, {config.max_context}), not {bad[0]}")
    weights = random_weights(config, seed=1)
    model = quantize(weights, calibrate(weights, seed=2, sequences=1, length=32))
    rows = []
    for lanes in args.lanes:
        for context in args.context:
            start = time.monotonic()
            cycles, ideal = cycles_per_token(model, lanes, context)
            seconds = time.monotonic() - start
            rows.append([args.preset, lanes, context, cycles, ideal,
                         f"{100 * ideal / cycles:.1f}", f"{cycles / seconds:,.0f}"])
    print(format_table(["preset", "lanes", "context", "cycles/token", "ideal (weight beats)",
                        "utilization %", "sim cycles/s"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
