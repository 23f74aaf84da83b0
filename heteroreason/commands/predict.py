#!/usr/bin/env python3
"""Project the draft model's decode speed on FPGA boards from the RTL-calibrated timing model,
against the HBM roofline, an edge GPU and the paper's own projection.

    heteroreason predict --out build/predict_fpga.png

For each board: the design chosen (MACs per cycle, stream bytes per cycle, heads in parallel),
its estimated resources against the board's, and per context length the draft ms/token,
tokens/s, the HBM roofline (weight and KV bytes per token over what the board's HBM ports
sustain at its clock, :mod:`heteroreason.model.timing.fpga.hbm`; each board's memory plan is
printed) and the fraction of it reached, and the speed-up over the paper's U280 line (the
artifact's preset ``fpga/artifact-u280``: 5.74 ms + 0.002464 ms per KV entry attended); the
shadow ingest of a refined step (``--ingest-step`` tokens) against as many decode tokens, token
by token and in batches of ``--ingest-batch`` (the design built with as many tokens a pass, with
its resources); a pass drafting for several problems at once (``--passes``: 1, 2, 4 contexts a
pass, the MultiDraftEngine's, priced by the calibrated pass); each design's tok/s at the
``--clocks`` by context, with its share of the memory
ceiling (the HBM's achievable bandwidth over a token's bytes); then what backs each
board's clock (the committed timing evidence against the clock's LUT budget). Writes a plot of
ms/token against context length.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from heteroreason.commands.common import (
    OutputBusy,
    command_parser,
    staged_output,
    write_run_record,
    write_table,
)
from heteroreason.model.experiments.report import format_table
from heteroreason.model.files import InputError, output_problem
from heteroreason.model.spec.numerics.qwen2_config import PRESETS, qwen2_config
from heteroreason.model.timing.device_timing import PAPER_U280, timing
from heteroreason.model.timing.fpga.calibration import CalibrationError, load_calibration
from heteroreason.model.timing.fpga.clock_basis import clock_basis, ecp5_basis
from heteroreason.model.timing.fpga.fit import load_fit_evidence
from heteroreason.model.timing.fpga.hbm import HbmError, weight_ceiling_bytes_per_s
from heteroreason.model.timing.fpga.passes import ESTIMATE, MOST_A_PASS, pass_costs
from heteroreason.model.timing.fpga.platform import (
    BOARDS,
    batched_ingest_ms,
    batched_ingest_resources,
    core_timing,
    design_for,
    draft_ms_per_token,
    edge_gpu_ms_per_token,
    estimate_resources,
    memory_plan,
)
from heteroreason.model.timing.fpga.resources import Resources


def paper_u280_ms(context: int) -> float:
    return timing(PAPER_U280).token_ms(context)


def _parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The options."""
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--model", default="qwen2.5-0.5b", choices=sorted(PRESETS),
                        help="the draft model (a preset of the model shapes)")
    parser.add_argument("--boards", nargs="+", default=list(BOARDS), choices=list(BOARDS),
                        help="the FPGA boards projected")
    parser.add_argument("--contexts", type=int, nargs="+", default=[0, 512, 1024, 2048, 4095],
                        help="the context lengths (tokens) at which a token is priced")
    parser.add_argument("--ingest-step", type=int, default=100,
                        help="tokens of the refined step whose shadow ingest is priced "
                             "(default 100)")
    parser.add_argument("--ingest-batch", type=int, default=4,
                        help="tokens a pass of the modelled batched ingest (default 4)")
    parser.add_argument("--passes", type=int, nargs="+", default=[1, 2, 4],
                        help="contexts drafted a pass (powers of two up to 8)")
    parser.add_argument("--clocks", type=float, nargs="+", default=[200.0, 250.0, 300.0],
                        metavar="MHZ", help="the clocks each board's design is also priced at "
                                            "(MHz; until a routed design backs a clock, "
                                            "the headline is shown at several)")
    parser.add_argument("--out", type=Path, default=Path("build/predict"),
                        help="the output directory (predict.png, the tables as CSV and JSON, "
                             "run.json)")
    return parser


def _synthesized(b: str, params):
    """The design's synthesized totals (the fit evidence, when it holds this design of this
    RTL), or None."""
    try:
        evidence = load_fit_evidence()
    except InputError:
        return None
    fit = evidence.design(b)
    if evidence.stale or fit is None or fit.design.params != params:
        return None
    return Resources(**fit.total)


def _print_designs(config, designs: dict) -> tuple[list[str], list[list]]:
    """Each board's chosen design and its resources: synthesized where the fit evidence holds
    the design, estimated (the design search's formulas) otherwise."""
    rows = []
    for b, params in designs.items():
        board = BOARDS[b]
        synthesized = _synthesized(b, params)
        need = synthesized or estimate_resources(config, params)
        have = board.resources
        rows.append([b, f"{board.clock_hz / 1e6:.0f}", params.beat_bytes, params.rows_per_beat,
                     params.stream_bytes, params.heads_parallel, params.vector_width,
                     params.param_width, params.weight_buffer, params.kv_rows,
                     f"{need.lut:,}/{have.lut:,}", f"{need.dsp:,}/{have.dsp:,}",
                     f"{need.bram18k:,}/{have.bram18k:,}", f"{need.uram:,}/{have.uram:,}",
                     "synthesized (core)" if synthesized else "estimated",
                     "yes" if need.fits(have) else "NO"])
    header = ["board", "MHz", "MACs/cycle", "rows/beat", "stream B/cycle", "heads ||",
              "vector width", "gains/beat", "weight buffer", "KV rows/cycle", "LUT", "DSP",
              "BRAM18K", "URAM", "resources", "fits the device"]
    print(format_table(header, rows))
    _print_fit(designs)
    return header, rows


def _print_fit(designs: dict) -> None:
    """Each design against its board from synthesis, per SLR (``heteroreason fit``)."""
    try:
        evidence = load_fit_evidence()
    except InputError as exc:
        print(f"fit from synthesis: no evidence ({exc})")
        return
    print("fit from synthesis, per SLR (heteroreason fit; model/timing/fpga/data/"
          "fit_evidence.json" + (", STALE: from other RTL" if evidence.stale else "") + "):")
    for b, params in designs.items():
        fit = evidence.design(b)
        if fit is None or fit.design.params != params:
            print(f"  {b}: this design is not synthesized (heteroreason fit --synthesize)")
            continue
        plan = fit.floorplan(b)
        if plan is None:
            have = BOARDS[b].resources
            print(f"  {b}: no SLR data; the device: " + ", ".join(
                f"{r.upper()} {fit.total[r]:,}/{getattr(have, r):,}"
                for r in ("lut", "dsp", "bram18k", "uram")))
        elif plan.fits:
            print(f"  {b}: fits every SLR within the failfast guidelines (not placed or routed)")
        else:
            print(f"  {b}: DOES NOT FIT: " + "; ".join(plan.over))


def _print_memory(config, designs: dict) -> None:
    """Each board's HBM: its roofline, the port plan and the weight stream's ceiling."""
    print("HBM (model/timing/fpga/hbm.py): the roofline below is what every port together "
          "sustains at the board's clock")
    for b, params in designs.items():
        board = BOARDS[b]
        hbm = board.hbm
        native = hbm.ports * hbm.port_bytes_per_s(hbm.native_port_bits, board.clock_hz)
        head = (f"  {b}: {hbm.pseudo_channels} pseudo-channels, "
                f"{hbm.peak_bytes_per_s / 1e9:.0f} GB/s peak, "
                f"{hbm.achievable_bytes_per_s / 1e9:.0f} achievable; ")
        if hbm.port_clock_hz is not None:
            print(head + f"{hbm.ports} ports of {'/'.join(map(str, hbm.port_bits))} bits at "
                  f"their own {hbm.port_clock_hz / 1e6:g} MHz: "
                  f"{board.usable_bandwidth_bytes_per_s / 1e9:.0f} GB/s (roofline)")
        else:
            print(head + f"{hbm.ports} ports at {board.clock_hz / 1e6:g} MHz: "
                  f"{native / 1e9:.0f} GB/s with {hbm.native_port_bits}-bit ports, "
                  f"{board.usable_bandwidth_bytes_per_s / 1e9:.0f} GB/s with "
                  f"{max(hbm.port_bits)}-bit ports (roofline)")
        plan = memory_plan(config, board, params)
        print(f"    plan: {plan.describe()}")
        kv_row_bytes = config.head_dim * params.kv_rows if params.external_kv else 0
        ceiling = weight_ceiling_bytes_per_s(hbm, board.clock_hz, kv_row_bytes=kv_row_bytes,
                                             param_width=params.param_width)
        weights = config.decode_counts(0).weight_bytes
        if plan.shared:
            shared = plan.stream("weights").bytes_per_s
            print(f"    the weights on every port: at most {shared / 1e9:.0f} GB/s, the weights "
                  f"alone {1e3 * weights / shared:.3f} ms/token ({shared / weights:.0f} tok/s); "
                  f"with the narrow streams on ports of their own, {ceiling / 1e9:.0f} GB/s "
                  f"({ceiling / weights:.0f} tok/s)")
        else:
            print(f"    a weight stream of any width on the ports left: at most "
                  f"{ceiling / 1e9:.0f} GB/s ({ceiling / board.clock_hz:.0f} B/cycle), the "
                  f"weights alone {1e3 * weights / ceiling:.3f} ms/token "
                  f"({ceiling / weights:.0f} tok/s)")
        print(f"    source: {hbm.source}; efficiency: {hbm.efficiency_source}")
        if hbm.port_clock_hz is not None:
            print(f"    port clock: {hbm.port_clock_source}")


def _print_speeds(config, boards: list[str], contexts: list[int]
                  ) -> tuple[list[str], list[list]]:
    """ms/token of each board and the edge GPU by context, against the roofline and the paper."""
    rows = []
    for b in boards:
        board = BOARDS[b]
        for context in contexts:
            ms = draft_ms_per_token(config, board, context)
            counts = config.decode_counts(context)
            roof = 1000.0 * (counts.weight_bytes + counts.kv_bytes_read +
                             counts.kv_bytes_written) / board.usable_bandwidth_bytes_per_s
            rows.append([b, context, f"{ms:.3f}", f"{1000 / ms:.0f}", f"{roof:.3f}",
                         f"{100 * roof / ms:.0f}", f"{paper_u280_ms(context):.3f}",
                         f"{paper_u280_ms(context) / ms:.2f}"])
    for context in contexts:
        ms = edge_gpu_ms_per_token(config, "jetson-orin-nano", context)
        rows.append(["jetson-orin-nano", context, f"{ms:.3f}", f"{1000 / ms:.0f}", "-", "-",
                     f"{paper_u280_ms(context):.3f}", f"{paper_u280_ms(context) / ms:.2f}"])
    header = ["device", "context", "ms/token", "tok/s", "roofline ms", "% of roofline",
              "paper U280 ms", "speed-up vs paper"]
    print(format_table(header, rows))
    return header, rows


def _print_ingests(config, designs: dict, contexts: list[int], step: int,
                   batch: int) -> tuple[list[str], list[list]]:
    """A refined step's shadow ingest, token by token and batched, against as many decodes."""
    print(f"shadow synchronisation: a refined step of {step} tokens ingested token "
          f"by token (each a pass over the weights, no LM head) against {step} "
          f"decode tokens, from the context given:")
    rows = []
    for b in list(designs):
        board = BOARDS[b]
        for context in contexts:
            span = range(context, min(context + step, config.max_context))
            ingest = sum(draft_ms_per_token(config, board, c, keep_logits=False) for c in span)
            decode = sum(draft_ms_per_token(config, board, c) for c in span)
            batched = batched_ingest_ms(config, board, context, len(span), batch=batch)
            rows.append([b, context, len(span), f"{ingest:.1f}", f"{ingest / len(span):.3f}",
                         f"{decode:.1f}", f"{decode / ingest:.2f}", f"{batched:.1f}",
                         f"{decode / batched:.2f}"])
    header = ["board", "context", "tokens", "ingest ms", "ms/token", "decode ms",
              "decode / ingest", f"batched ingest ms (B={batch})", "decode / batched"]
    print(format_table(header, rows))
    print(f"  the designs with a batched ingest of {batch} (the matrix-vector unit's {batch} "
          f"vectors a beat, two a DSP slice; a scratchpad bank a token; the fastest that "
          f"fits, estimated):")
    for b in designs:
        params = design_for(config, BOARDS[b], ingest_batch=batch)
        have = BOARDS[b].resources
        need = batched_ingest_resources(config, replace(params, ingest_batch=1), batch)
        print(f"    {b}: {params.lanes} lanes x {params.rows_per_beat} rows, "
              f"{params.kv_rows} KV rows a cycle: LUT {need.lut:,}/{have.lut:,}, FF "
              f"{need.ff:,}/{have.ff:,}, DSP {need.dsp:,}/{have.dsp:,}, BRAM18K "
              f"{need.bram18k:,}/{have.bram18k:,}")
    return header, rows


def _print_passes(config, boards: list[str], contexts: list[int],
                  passes: list[int]) -> tuple[list[str], list[list]]:
    """A pass drafting for several problems against one token of the board's design (one
    token a pass) and against one context a pass on the design built for the pass."""
    print(f"drafting for several problems a pass ({ESTIMATE}); every context at the one given; "
          "'x one token': against the board's one-token design, 'x its token': against one "
          "context a pass on the design built for the pass:")
    header = ["board", "contexts a pass", "context", "pass ms", "x one token", "x its token",
              "tok/s"]
    rows = [[c.board, c.contexts, c.context, f"{c.pass_ms:.3f}", f"{c.ratio:.2f}",
             f"{c.same_design_ratio:.2f}", f"{c.tokens_per_s:.0f}"]
            for c in pass_costs(config, boards, passes, contexts)]
    print(format_table(header, rows))
    return header, rows


def _print_clock_sweep(config, designs: dict, contexts: list[int], clocks_mhz: list[float]
                       ) -> tuple[list[str], list[list]]:
    """Each board's design at other clocks: tok/s by context, with its share of the memory
    ceiling (the HBM's achievable bandwidth over a token's weight and KV bytes, whatever the
    ports and the clock)."""
    overheads = load_calibration().overheads
    header = ["design", "context", "ceiling tok/s",
              *(f"{mhz:g} MHz tok/s (% of ceiling)" for mhz in clocks_mhz)]
    rows = []
    for b, params in designs.items():
        board = BOARDS[b]
        for context in contexts:
            counts = config.decode_counts(context)
            ceiling = board.hbm.achievable_bytes_per_s / (
                counts.weight_bytes + counts.kv_bytes_read + counts.kv_bytes_written)
            row = [b, context, f"{ceiling:.0f}"]
            for mhz in clocks_mhz:
                at = replace(board, clock_hz=mhz * 1e6)  # the same design, another clock
                try:
                    cycles = core_timing(config, at, params, overheads).token_cycles(context)
                except HbmError:  # a stream the ports cannot carry at this clock
                    row.append("-")
                    continue
                tok_s = at.clock_hz / cycles
                row.append(f"{tok_s:.0f} ({100 * tok_s / ceiling:.0f} %)")
            rows.append(row)
    print(f"each design at {', '.join(f'{m:g}' for m in clocks_mhz)} MHz (its memory plan and "
          f"latency at that clock; the calibrated cycle model):")
    print(format_table(header, rows))
    return header, rows


def _print_clocks(boards: list[str]) -> None:
    """What backs each board's clock."""
    print("clock basis (UltraScale+ -2 logic levels of the units at the U280 design's widths, "
          "model/timing/fpga/data/timing_evidence.json):")
    for b in boards:
        try:
            print(f"  {b}: {clock_basis(BOARDS[b].clock_hz).summary()}")
        except InputError as exc:
            print(f"  {b}: {BOARDS[b].clock_hz / 1e6:g} MHz assumed ({exc})")
    try:  # the RTL's structure on a routed part (model/timing/fpga/data/ecp5_evidence.json)
        print(f"  {ecp5_basis().summary()}")
    except InputError as exc:
        print(f"  ECP5: no evidence ({exc})")


def _plot(config, boards: list[str], out: Path) -> Path:
    """ms/token by context of every board, the paper's U280 and the edge GPU."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = list(range(0, min(4096, config.max_context), 128))
    fig, ax = plt.subplots(figsize=(7, 4))
    for b in boards:
        ax.plot(grid, [draft_ms_per_token(config, b, c) for c in grid], label=f"{b} (RTL model)")
    ax.plot(grid, [paper_u280_ms(c) for c in grid], "k--", label="paper: U280 300 MHz")
    ax.plot(grid, [edge_gpu_ms_per_token(config, "jetson-orin-nano", c) for c in grid], ":",
            label="Jetson Orin Nano (roofline)")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("draft ms / token")
    ax.set_title(f"{config.name} W8A8 draft decode: the RTL-calibrated designs of "
                 f"{', '.join(boards)}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
    print(f"wrote {out}")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = _parser(prog)
    args = parser.parse_args(argv)
    problem = output_problem(args.out, folder=True)
    if problem:
        parser.error(f"--out: {problem}")
    if args.ingest_step < 1:
        parser.error(f"--ingest-step must be a positive integer, not {args.ingest_step}")
    if args.ingest_batch < 1:
        parser.error(f"--ingest-batch must be a positive integer, not {args.ingest_batch}")
    limit = qwen2_config(args.model).max_context
    for name, value in (("--ingest-step", args.ingest_step),
                        ("--ingest-batch", args.ingest_batch)):
        if value > limit:  # a step or batch longer than the model's context is none
            parser.error(f"{name} must be at most the model's context, {limit}, not {value}")
    config = qwen2_config(args.model)
    bad = [n for n in args.passes if not 1 <= n <= MOST_A_PASS]
    if bad:
        parser.error(f"--passes must be integers in [1, {MOST_A_PASS}] (contexts a pass), "
                     f"not {bad[0]}")
    bad = [m for m in args.clocks if not 1 <= m <= 2000]  # no FPGA fabric clock lies outside
    if bad:
        parser.error(f"--clocks must be numbers in [1, 2000] (MHz), not {bad[0]:g}")
    bad = [c for c in args.contexts if not 0 <= c < config.max_context]
    if bad:
        parser.error(f"--contexts must be in [0, {config.max_context}), not {bad[0]}")
    try:
        designs = {b: design_for(config, b) for b in args.boards}
    except CalibrationError as exc:
        print(f"heteroreason predict: error: {exc}", file=sys.stderr)
        return 2
    tables = {"designs": _print_designs(config, designs)}
    _print_memory(config, designs)
    tables["speeds"] = _print_speeds(config, args.boards, args.contexts)
    tables["ingests"] = _print_ingests(config, designs, args.contexts, args.ingest_step,
                                       args.ingest_batch)
    tables["passes"] = _print_passes(config, args.boards, args.contexts, args.passes)
    tables["clocks"] = _print_clock_sweep(config, designs, args.contexts, args.clocks)
    _print_clocks(args.boards)
    try:
        with staged_output(args.out) as stage:  # whole or absent; one writer at a time
            written = [path for name, (header, rows) in tables.items()
                       for path in write_table(stage / name, header, rows)]
            written.append(_plot(config, args.boards, stage / "predict.png"))
            written.append(write_run_record(
                stage, command="predict", argv=list(sys.argv[1:] if argv is None else argv),
                models={b: {"board": BOARDS[b].source, "design": repr(p)}
                        for b, p in designs.items()},
                seeds={}, outputs=written))
    except OutputBusy as exc:
        print(f"heteroreason predict: error: --out: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}/ (" + ", ".join(p.name for p in written) + ")")
    return 0

if __name__ == "__main__":
    sys.exit(main())
