#!/usr/bin/env python3
"""Cycles per decode token of the decoder core (RTL on Verilator under cocotb) against the
weight-stream ideal, at chosen context lengths, and the simulation speed.

    heteroreason bench decoder                      # small preset and full-size layer
    heteroreason bench decoder --configs small --contexts 16 512 --latency 64

The ideal is the stream beats of one sampled token (weight bytes / stream bytes per cycle, one
beat per cycle); utilization = ideal / measured cycles, and of the memory's rate = ideal / (the
cycles x the weight beats a cycle the memory offers). By default every stream has the same
latency and ``--stall`` (the rate ``1 - stall``); with ``--board`` the weights are striped over
the ports the board's memory plan gives them (``plan_memory``), each port skipping the share of
cycles its bandwidth cannot fill (the rate the plan's ``beats_per_cycle``) and running up to
``--port-fifo`` slices ahead of the slowest (by default the slices in flight at the latency
and that rate, which a port must buffer to sustain it; with refreshes, the latency's and a
refresh's cycles, a beat each, which the KV rows need to run ahead by), its skipped cycles
laid out as ``--gaps`` says: ``random`` (each cycle skipped at random, the stress pattern of
the tests), ``paced`` (a beat whenever the rate has accrued one) or ``refresh`` (paced, and a
refresh of tRFC every tREFI at a phase of each port's own: ``port_gaps.HBM_REFRESH_S``, a
claim); the boards' plans time-share the
ports, so the parameters and the KV rows are read on the same ports, ahead of the weights
(the testbench's ``SharedPorts``). Cycles without a beat are split into those
where the prefetch buffer was full (compute-bound stretches longer than the buffer covers) and
those where memory had nothing to offer (request latency at the token's start, the tail after
the last weight). The KV cache holds whatever is there: timing does not depend
on its values.
"""

from __future__ import annotations

import math
import random
import sys
import time

from heteroreason.commands.common import command_parser
from heteroreason.model.experiments.report import format_table
from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.platform import BOARDS, memory_plan
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.sim.measure.cycles import MeasurementError, TokenCycles, measure_token_cycles
from heteroreason.sim.measure.waves import core_activity, operator_name
from heteroreason.sim.verify.tb.port_gaps import PortGaps, refresh_cycles

# (preset, the core's parameters)
CONFIGS: dict[str, tuple[str, DecoderParams]] = {
    "small": ("test-small", DecoderParams(16, 8, heads_parallel=4, weight_buffer=2048)),
    "small-equal-rates": ("test-small", DecoderParams(8, 8, heads_parallel=4,
                                                      weight_buffer=2048)),
    "tiny": ("test-tiny", DecoderParams(16, 8, heads_parallel=2, weight_buffer=1024)),
    "0.5b-layer": ("test-0.5b-layer", DecoderParams(128, 64, heads_parallel=7,
                                                    weight_buffer=2048)),
    # the design chosen for the U280 at 300 MHz (four rows of 896 a 3,584-byte beat, KV cache
    # in HBM four rows a cycle, 32 scratchpad elements a cycle, 8 entries a parameter beat)
    "0.5b-layer-u280": ("test-0.5b-layer", DecoderParams(896, 3584, heads_parallel=7,
                                                         weight_buffer=2048, external_kv=True,
                                                         vector_width=32, param_width=8,
                                                         rows_per_beat=4, kv_rows=4)),
}


def bench(preset: str, params: DecoderParams, contexts: list[int], *, latency: int,
          stall: float, waves: bool = False, weight_ports: tuple = (),
          port_fifo_depth: int = 8, shared_ports: bool = False, port_gaps: str = "random",
          port_refresh: tuple[int, ...] = ()) -> tuple[list[TokenCycles], list[dict] | None]:
    """The measured tokens and, with ``waves``, each token's cycles per operator."""
    try:
        run = measure_token_cycles(preset, params, contexts, latency=latency, stall=stall,
                                   waves=waves, weight_ports=weight_ports,
                                   port_fifo_depth=port_fifo_depth, shared_ports=shared_ports,
                                   port_gaps=port_gaps, port_refresh=port_refresh)
    except MeasurementError as exc:
        raise SystemExit(f"bench_decoder: {exc}") from None
    if not waves:
        return list(run.tokens), None
    print(f"waves: {run.waves}", file=sys.stderr)
    per_token = []
    for token in core_activity(run.waves):
        per_op: dict[str, int] = {"start": token.start_cycles} if token.start_cycles else {}
        for pc, _, _, cycles in token.operators:
            per_op[operator_name(pc)] = per_op.get(operator_name(pc), 0) + cycles
        per_token.append(per_op)
    return list(run.tokens), per_token


def _board_ports(args, name: str, preset: str, params: DecoderParams):
    """``(rate, ports, fifo, shared, refresh)`` of ``args.board``'s memory plan for ``params``
    (its weights' rate and ports, the FIFO depth, whether the plan time-shares the ports, and
    the refresh's ``(period, busy)`` cycles with ``--gaps refresh``)."""
    plan = memory_plan(qwen2_config(preset), BOARDS[args.board], params)
    weights = plan.stream("weights")
    rate = weights.beats_per_cycle
    ports = ((args.latency, 1.0 - rate),) * weights.ports
    refresh = refresh_cycles(BOARDS[args.board].clock_hz) if args.gaps == "refresh" else ()
    if refresh:  # a port too fast to refresh is refused here, before the build
        PortGaps(1.0 - rate, pattern="paced", rng=random.Random(0), refresh=refresh)
    # the slices in flight over the latency; with refreshes, the slices of the latency and of
    # a refresh at a beat a cycle, the pace of the narrow streams that share the ports (the KV
    # rows), which a port must run ahead by to hide a refresh
    fifo = args.port_fifo or (max(8, math.ceil(args.latency + refresh[1])) if refresh
                              else max(8, math.ceil(args.latency * rate)))
    print(f"{name} on {args.board}'s memory plan: {plan.describe()}; a FIFO of {fifo} slices "
          f"a port; {args.gaps} gaps" +
          (f" ({refresh[1]} of every {refresh[0]} cycles refreshing)" if refresh else ""),
          file=sys.stderr)
    return rate, ports, fifo, plan.shared, refresh


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--configs", nargs="+", default=["small", "0.5b-layer"],
                        choices=sorted(CONFIGS), help='the decoder presets benchmarked')
    parser.add_argument("--contexts", type=int, nargs="+", default=[16, 512],
                        help="KV positions of the timed token (its attention spans pos + 1)")
    parser.add_argument("--latency", type=int, default=64,
                        help="memory latency in cycles (default 64)")
    parser.add_argument("--waves", action="store_true",
                        help="record a VCD and print each token's cycles per operator from it")
    parser.add_argument("--stall", type=float, default=0.0,
                        help="probability a memory cycle has no beat (default 0)")
    parser.add_argument("--board", choices=sorted(BOARDS),
                        help="stripe the weights over the ports the board's memory plan gives "
                             "them, at its rate (not with --stall)")
    parser.add_argument("--port-fifo", type=int,
                        help="with --board: slices a port may deliver ahead of the slowest "
                             "(default: the slices in flight at the latency and the port's "
                             "rate, which a port must buffer to sustain its rate; with --gaps "
                             "refresh, the latency's and a refresh's cycles)")
    parser.add_argument("--gaps", choices=("random", "paced", "refresh"), default="random",
                        help="with --board: how a port's skipped cycles fall (default random)")
    args = parser.parse_args(argv)
    if args.gaps != "random" and not args.board:
        parser.error(f"--gaps {args.gaps} needs --board (the ports whose gaps it lays out)")
    if args.port_fifo is not None and args.port_fifo < 1:
        parser.error(f"--port-fifo must be a positive integer, not {args.port_fifo}")
    if args.board and args.stall:
        parser.error("--stall and --board exclude each other: the board's plan sets the rate")
    if args.latency < 0:
        parser.error(f"--latency must be a non-negative integer, not {args.latency}")
    if not 0.0 <= args.stall < 1.0:
        parser.error(f"--stall must be in [0, 1), not {args.stall}")
    for name in args.configs:
        limit = qwen2_config(CONFIGS[name][0]).max_context
        bad = [c for c in args.contexts if not 0 <= c < limit]
        if bad:
            parser.error(f"--contexts must be in [0, {limit}) for config {name}, not {bad[0]}")
    rows = []
    for name in args.configs:
        preset, params = CONFIGS[name]
        rate, ports, fifo, shared, refresh = 1.0 - args.stall, (), 8, False, ()
        if args.board:
            try:
                rate, ports, fifo, shared, refresh = _board_ports(args, name, preset, params)
            except ValueError as exc:
                parser.error(f"--gaps {args.gaps} on {args.board} with config {name}: {exc}")
        start = time.monotonic()
        tokens, operators = bench(preset, params, args.contexts, latency=args.latency,
                                  stall=args.stall, waves=args.waves, weight_ports=ports,
                                  port_fifo_depth=fifo, shared_ports=shared,
                                  port_gaps="random" if args.gaps == "random" else "paced",
                                  port_refresh=refresh)
        for token, per_op in zip(tokens, operators or [], strict=False):
            print(f"{name} position {token.position}: " + ", ".join(
                f"{k} {v}" for k, v in per_op.items()))
        wall = time.monotonic() - start
        for t in tokens:
            idle = t.cycles - t.stream_beats
            rows.append([name, preset, params.beat_bytes, params.stream_bytes, t.position,
                         t.cycles,
                         t.stream_beats, f"{100 * t.stream_beats / t.cycles:.1f}",
                         f"{100 * t.stream_beats / (t.cycles * rate):.1f}",
                         t.buffer_full, idle - t.buffer_full,
                         f"{t.cycles / t.sim_seconds:,.0f}"])
        print(f"{name}: {wall:.0f} s including the Verilator build", file=sys.stderr)
    print(format_table(["config", "preset", "MACs/cycle", "stream B/cycle", "position",
                        "cycles/token", "ideal (stream beats)", "utilization %",
                        "of the memory's rate %",
                        "held (buffer full)", "memory idle", "sim cycles/s"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
