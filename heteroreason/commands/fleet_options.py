"""The options the ``heteroreason fleet`` subcommands share, and the fleet point they describe."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from heteroreason.commands.common import non_negative, positive
from heteroreason.model.fleet.search import FLEET_FPGA, FleetPoint
from heteroreason.model.system.config import CONFIGS, FPGA_MODELS, ServingMode
from heteroreason.model.timing.fpga.platform import ENGINE_CONTEXTS
from heteroreason.model.workload.bundled import BUNDLED_DIR

__all__ = ["DATASETS", "cluster_options", "fleet_options", "fleet_point"]

DATASETS = sorted(p.stem for p in BUNDLED_DIR.glob("*.jsonl"))


def fleet_options(parser: argparse.ArgumentParser, *, rate: bool = True, configs: bool = False,
             modes: bool = False, grid: bool = False) -> None:
    """The options every fleet subcommand shares; ``configs`` and ``modes`` take lists (in
    place of ``--config`` and ``--mode``) where the subcommand compares several, ``grid``: the
    board's contexts too (a sizing grid)."""
    if configs:
        parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS),
                            default=["config1"], help="the system configurations compared")
    else:
        parser.add_argument("--config", choices=sorted(CONFIGS), default="config1",
                            help="the system configuration")
    if modes:
        parser.add_argument("--modes", nargs="+", choices=[m.value for m in ServingMode],
                            default=["heteroreason"], help="one curve per serving mode")
    else:
        parser.add_argument("--mode", choices=[m.value for m in ServingMode],
                            default="heteroreason", help="the serving mode")
    parser.add_argument("--fpga", choices=sorted(FPGA_MODELS), default=FLEET_FPGA,
                        help="the FPGA draft model: this project's design on a board "
                             "(rtl-*: one problem a board; rtl-*-batch4: its MultiDraftEngine "
                             f"holds {ENGINE_CONTEXTS} and drafts up to four a pass), or "
                             "'artifact', the paper "
                             "artifact simulator's U280 (as many problems a board as its HBM "
                             "holds, the paper's claim)")
    parser.add_argument("--contexts", type=positive(int, "contexts"), default=None,
                        nargs="+" if grid else None,
                        help="problems an FPGA board holds at once (default: the design's; "
                             "more is a board the RTL does not build; at most what its HBM "
                             "holds)" + ("; a list: one grid each" if grid else ""))
    parser.add_argument("--per-pass", type=positive(int, "per_pass"), default=None,
                        nargs="+" if grid else None,
                        help="drafts a board runs a pass of its weights, a power of two "
                             "(default: the design's, 4 for rtl-*-batch4, else 1; priced by "
                             "the calibrated pass of the MultiDraftEngine)"
                             + ("; a list: one grid each" if grid else ""))
    parser.add_argument("--pools", nargs=3, type=positive(int, "pool"), default=[1, 1, 1],
                        metavar=("DRAFTS", "PRMS", "TARGETS"),
                        help="devices in the draft, PRM and target pools")
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=["math500"],
                        help="the datasets problems are drawn from (their bundled traces)")
    if rate:
        parser.add_argument("--rate", type=positive(float, "rate"), default=0.1,
                            help="mean arrivals per second")
    parser.add_argument("--cv", type=positive(float, "cv"), default=1.0,
                        help="coefficient of variation of the gaps (1: Poisson; gamma otherwise)")
    parser.add_argument("--problems", type=positive(int, "problems"), default=400,
                        help="problems arriving in a run")
    parser.add_argument("--seed", type=non_negative, default=0,
                        help="seed of the arrivals and the problems drawn")
    parser.add_argument("--routing", choices=["least", "round-robin"], default="least",
                        help="how a request picks a device of its pool: the least loaded, or "
                             "in turn")
    parser.add_argument("--max-prefetch", type=non_negative, default=None,
                        help="step-ahead prefetches a target GPU's batch may hold (default: "
                             "as many as it has room for)")
    parser.add_argument("--out", type=Path, default=Path("build/fleet"),
                        help="the output directory")


def cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=positive(int, "workers"), default=None,
                        help="a local Dask cluster of this many processes")
    parser.add_argument("--scheduler", default=None,
                        help="an existing Dask scheduler (tcp://HOST:PORT)")


def fleet_point(args, **changes) -> FleetPoint:
    d, p, t = args.pools
    point = FleetPoint(config=args.config, mode=args.mode, fpga=args.fpga, drafts=d, prms=p,
                       targets=t, datasets=tuple(args.datasets),
                       rate_per_s=getattr(args, "rate", 0.1), cv=args.cv,
                       problems=args.problems, seed=args.seed, routing=args.routing,
                       max_prefetch=args.max_prefetch,
                       contexts=None if isinstance(args.contexts, list) else args.contexts,
                       per_pass=None if isinstance(args.per_pass, list) else args.per_pass)
    return replace(point, **changes)
