#!/usr/bin/env python3
"""The control RTL's checks: export the KVMU, the multi-context KVMU and the front end, run their
testbenches, prove the KVMU's invariants and the contexts' isolation, print a summary.

    heteroreason rtl-checks [--events 10000] [--seed 1] [--sim verilator|icarus]

Exports every top to Verilog (build/verilog), runs the cocotb testbenches of the KVMU, the
multi-context KVMU (four contexts) and the front end (directed tests, the paper's scenarios,
constrained-random traffic), and proves with SymbiYosys the KVMU's invariants and that the
multi-context KVMU keeps its contexts apart. Exit status 1 if anything fails.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from heteroreason.commands.common import command_parser
from heteroreason.model.files import output_problem
from heteroreason.sim.flow.export import TOPS, build_top, ports_of, write_verilog
from heteroreason.sim.flow.toolchain import SIMULATORS, requested_simulator
from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.runner import run_cocotb

# random events a traffic profile takes: the default 10,000 run in seconds on Verilator, the
# bound in minutes; below the floor the random tests' coverage goals (every legal event kind of
# each bench, five kinds of illegal event on the KVMU, whose rarest come about once in 2,000
# events) are not met by chance: at 1,000 events the KVMU bench sees four kinds
MIN_EVENTS = 5_000
MAX_EVENTS = 1_000_000
BENCHES = [
    ("kvmu", "heteroreason.sim.verify.tb.kvmu_tb", {"capacity": 64}),
    ("multi_kvmu", "heteroreason.sim.verify.tb.multi_kvmu_tb", {"contexts": 4, "capacity": 64}),
    ("kv_frontend", "heteroreason.sim.verify.tb.frontend_tb",
     {"capacity": 512, "token_width": 16, "max_in_flight": 4}),
]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--events", type=int, default=10000,
                        help=f"random events per traffic profile, at least {MIN_EVENTS:,} (the "
                             "random tests' coverage goals; default 10000)")
    parser.add_argument("--seed", type=int, default=1, help="COCOTB_RANDOM_SEED (default 1)")
    parser.add_argument("--sim", choices=SIMULATORS, default=None,
                        help="HDL simulator (default: $HETEROREASON_SIM or verilator)")
    parser.add_argument("--out", type=Path, default=Path("build"),
                        help="the build directory (Verilog, simulator builds, logs, proofs; "
                             "kept between runs as a cache)")
    parser.add_argument("--no-formal", action="store_true", help="skip the SymbiYosys proofs")
    args = parser.parse_args(argv)
    if not MIN_EVENTS <= args.events <= MAX_EVENTS:
        parser.error(f"--events must be an integer in [{MIN_EVENTS:,}, {MAX_EVENTS:,}] (fewer "
                     f"random events miss the tests' coverage goals), not {args.events}")
    if args.seed < 0:
        parser.error(f"--seed must be a non-negative integer, not {args.seed}")
    problem = output_problem(args.out, folder=True)  # before any export or simulation
    if problem:
        parser.error(f"--out: {problem}")
    simulator = requested_simulator(args.sim)
    ok = True

    print("Verilog export")
    for top in TOPS:
        component = build_top(top)
        ports = ports_of(component)
        path = write_verilog(component, top, args.out / "verilog")
        lines = path.read_text().count("\n")
        print(f"  {top:<12} {len(ports):>3} ports  {lines:>5} lines  {path}")

    print(f"cocotb testbenches on {simulator} (seed {args.seed}, {args.events} random events "
          "per traffic profile)")
    for top, module, params in BENCHES:
        start = time.monotonic()
        log = args.out / "logs" / f"{top}-seed{args.seed}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        result = run_cocotb(top, module, params=params, simulator=simulator, seed=args.seed,
                            stimulus=Stimulus(random_events=args.events),
                            build_root=args.out / "sim", log_file=log)
        seconds = time.monotonic() - start
        verdict = "PASS" if result.failed == 0 and result.tests > 0 else "FAIL"
        ok &= verdict == "PASS"
        print(f"  {top:<12} {verdict}  {result.tests - result.failed:>3}/{result.tests:<3} tests  "
              f"{seconds:6.1f} s  log {log}")

    if not args.no_formal:
        from heteroreason.sim.flow.formal import prove_kvmu

        start = time.monotonic()
        result = prove_kvmu(capacity=16, depth=20, work_dir=args.out / "formal" / "kvmu")
        ok &= result.passed
        print(f"formal (SymbiYosys k-induction, depth 20, capacity 16): {result.status}  "
              f"{time.monotonic() - start:.1f} s")
        from heteroreason.sim.flow.formal_contexts import prove_contexts

        start = time.monotonic()
        result = prove_contexts(contexts=3, capacity=6, depth=12,
                                work_dir=args.out / "formal" / "multi_kvmu")
        ok &= result.passed
        print(f"formal, contexts isolated (k-induction, depth 12, 3 contexts of 6): "
              f"{result.status}  {time.monotonic() - start:.1f} s")

    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
