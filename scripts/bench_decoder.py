#!/usr/bin/env python3
"""Cycles per decode token of the decoder core (RTL on Verilator under cocotb) against the
weight-stream ideal, at chosen context lengths, and the simulation speed.

    python scripts/bench_decoder.py                      # small preset and full-size layer
    python scripts/bench_decoder.py --config small --context 16 512 --latency 64

The ideal is the stream beats of one sampled token (weight bytes / stream bytes per cycle, one
beat per cycle); utilization = ideal / measured cycles. Cycles without a beat are split into
those where the prefetch buffer was full (compute-bound stretches longer than the buffer
covers) and those where memory had nothing to offer (request latency at the token's start,
the tail after the last weight). The KV cache holds whatever is there: timing does not depend
on its values.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from heteroreason.model.qwen2_config import qwen2_config
from heteroreason.model.report import format_table
from heteroreason.sim.cocotb_run import run_cocotb

CONFIGS = {
    "small": {"preset": "test-small", "lanes": 16, "stream_bytes": 8, "heads_parallel": 4,
              "weight_buffer": 2048},
    "small-equal-rates": {"preset": "test-small", "lanes": 8, "stream_bytes": 8,
                          "heads_parallel": 4, "weight_buffer": 2048},
    "tiny": {"preset": "test-tiny", "lanes": 16, "stream_bytes": 8, "heads_parallel": 2,
             "weight_buffer": 1024},
    "0.5b-layer": {"preset": "test-0.5b-layer", "lanes": 128, "stream_bytes": 64,
                   "heads_parallel": 7, "weight_buffer": 2048},
    # the design chosen for the U280 (KV cache in HBM, 32 scratchpad elements a cycle)
    "0.5b-layer-u280": {"preset": "test-0.5b-layer", "lanes": 896, "stream_bytes": 896,
                        "heads_parallel": 7, "weight_buffer": 512, "external_kv": 1,
                        "vector_width": 32},
}


OPERATORS = ["embed", "norm", "q_proj", "k_proj", "v_proj", "rope_q", "rope_k", "kv_write",
             "attention", "o_proj", "norm", "gate_proj", "silu_table", "up_proj", "down_proj",
             "final norm", "lm_head", "end"]


def bench(config: dict, contexts: list[int], *, latency: int, stall: float,
          waves: bool = False) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        log = Path(tmp) / "sim.log"
        result = run_cocotb(
            "decoder_core", "heteroreason.sim.tb.core_tb", params={"seed": 1} | config,
            testcase="token_timing",
            seed=1, log_file=log, waves=waves,
            extra_env={"HR_POSITIONS": ",".join(map(str, contexts)), "HR_LATENCY": str(latency),
                       "HR_STALL": str(stall), "HR_RESULT": str(out)})
        if result.failed or not out.exists():
            sys.stderr.write(log.read_text()[-4000:])
            raise SystemExit(f"bench_decoder: the simulation failed ({result.build_dir})")
        rows = json.loads(out.read_text())
    if waves:
        from heteroreason.sim.waves import core_activity

        print(f"waves: {result.waves}", file=sys.stderr)
        for row, token in zip(rows, core_activity(result.waves), strict=True):
            per_op: dict[str, int] = {}
            for pc, _, _, cycles in token.operators:
                name = OPERATORS[pc] if pc < len(OPERATORS) else f"op{pc}"
                per_op[name] = per_op.get(name, 0) + cycles
            row["operators"] = per_op
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", default=["small", "0.5b-layer"],
                        choices=sorted(CONFIGS))
    parser.add_argument("--context", type=int, nargs="+", default=[16, 512],
                        help="KV positions of the timed token (its attention spans pos + 1)")
    parser.add_argument("--latency", type=int, default=64,
                        help="memory latency in cycles (default 64)")
    parser.add_argument("--waves", action="store_true",
                        help="record a VCD and print each token's cycles per operator from it")
    parser.add_argument("--stall", type=float, default=0.0,
                        help="probability a memory cycle has no beat (default 0)")
    args = parser.parse_args(argv)
    if args.latency < 0:
        parser.error(f"--latency must be a non-negative integer, not {args.latency}")
    if not 0.0 <= args.stall < 1.0:
        parser.error(f"--stall must be in [0, 1), not {args.stall}")
    for name in args.config:
        limit = qwen2_config(CONFIGS[name]["preset"]).max_context
        bad = [c for c in args.context if not 0 <= c < limit]
        if bad:
            parser.error(f"--context must be in [0, {limit}) for config {name}, not {bad[0]}")
    rows = []
    for name in args.config:
        config = CONFIGS[name]
        start = time.monotonic()
        results = bench(config, args.context, latency=args.latency, stall=args.stall,
                        waves=args.waves)
        for r in results:
            if "operators" in r:
                print(f"{name} position {r['position']}: " + ", ".join(
                    f"{k} {v}" for k, v in r["operators"].items()))
        wall = time.monotonic() - start
        for r in results:
            idle = r["cycles"] - r["stream_beats"]
            rows.append([name, config["preset"], config["lanes"], config["stream_bytes"],
                         r["position"], r["cycles"], r["stream_beats"],
                         f"{100 * r['stream_beats'] / r['cycles']:.1f}", r["buffer_full"],
                         idle - r["buffer_full"], f"{r['cycles'] / r['sim_seconds']:,.0f}"])
        print(f"{name}: {wall:.0f} s including the Verilator build", file=sys.stderr)
    print(format_table(["config", "preset", "MACs/cycle", "stream B/cycle", "position",
                        "cycles/token", "ideal (stream beats)", "utilization %",
                        "held (buffer full)", "memory idle", "sim cycles/s"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
