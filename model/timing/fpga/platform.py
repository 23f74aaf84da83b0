"""FPGA boards (and an edge GPU for comparison), the decoder design chosen for a board, and the
one-call answer: draft milliseconds per token for a model, a board and a context length.

The design for a board is the :class:`~heteroreason.rtl.decoder.params.DecoderParams` that decodes
fastest (by the calibrated timing model, its weight stream at the rate the board's memory plan
sustains: :mod:`~heteroreason.model.timing.fpga.hbm`) among those whose streams the board's HBM
ports can carry, whose estimated resources fit the device (:func:`estimate_resources`: DSP slices
and memories counted from the units' structure, logic per multiplier from syntheses) and whose
binding units keep within each SLR's guidelines (:mod:`.unit_resources`); ``heteroreason fit``
measures a chosen design from synthesis.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config, qwen2_config
from heteroreason.model.timing.device_timing import LlmTiming
from heteroreason.model.timing.energy import DevicePower
from heteroreason.model.timing.fpga.calibration import CALIBRATION_FILE, load_calibration
from heteroreason.model.timing.fpga.core_cycles import CoreTiming, cycles_to_ms
from heteroreason.model.timing.fpga.hbm import (
    U280_HBM,
    V80_HBM,
    HbmError,
    HbmSpec,
    MemoryPlan,
    plan_memory,
    roofline_bytes_per_s,
)
from heteroreason.model.timing.fpga.resources import (
    Resources,
    batched_ingest_resources,
    estimate_resources,
)
from heteroreason.model.timing.fpga.unit_resources import place_binding_units
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.limits import MULTIPLE_LIMIT

__all__ = ["BOARDS", "EDGE_GPUS", "EdgeGpu", "FpgaBoard", "Resources", "batched_ingest_ms",
           "batched_ingest_resources", "board_power", "design_for", "draft_ms_per_token",
           "draft_timing", "edge_gpu_ms_per_token", "estimate_resources", "fpga_board"]


@dataclass(frozen=True)
class FpgaBoard:
    name: str
    clock_hz: float
    hbm: HbmSpec
    resources: Resources
    power_w: float
    source: str

    @property
    def hbm_bytes(self) -> float:
        """The data sheet's HBM capacity (bounds the problems a board holds)."""
        return self.hbm.capacity_bytes

    @property
    def usable_bandwidth_bytes_per_s(self) -> float:
        """What the board's ports sustain at its clock (:func:`.hbm.roofline_bytes_per_s`)."""
        return roofline_bytes_per_s(self.hbm, self.clock_hz)

    @property
    def memory_latency_cycles(self) -> int:
        """The HBM's read latency in kernel cycles."""
        return round(self.hbm.read_latency_s * self.clock_hz)


# what the design search tries: rows a matrix-vector beat, weight-buffer depths (beats) and
# key and value rows a cycle (:class:`DecoderParams`)
ROWS_PER_BEAT = (1, 2, 4)
WEIGHT_BUFFERS = (512, 2048, 4096)
KV_ROWS = (1, 2, 4, 8)
# the clock, as a share of the board's, at which the design search breaks ties between designs
# equally fast at the board's clock: 250 MHz for a 300 MHz board (the clock the U280's units
# are shown at beside 300 MHz until a routed design backs either)
MARGIN_CLOCK_RATIO = 250 / 300
# the boards' designs read the parameters and the KV rows on the weights' ports, time-shared
# (:func:`.hbm.plan_memory`): every port carries weights when nothing else flows
SHARED_PORTS = True
# problems a board of this project's design holds at once, and drafts a pass: a design of one
# token a pass is a DraftEngine (rtl/draft_engine.py: one KVMU, one KV region), one problem; a
# design built with a pass of several tokens (``ingest_batch`` B >= 2) is a MultiDraftEngine
# (rtl/multi_engine.py, docs/design.md §4.7) of ENGINE_CONTEXTS problems drafting up to B a pass:
# its evidence is the U280 depth run at 32 contexts and four a pass (timing_evidence.json; the
# multi-context KVMU of 32 contexts within the budget since its round robin's mask is a register)
# and the cocotb scenarios on three and four contexts; 32 contexts' KV at 4,096 positions is
# 0.8 GB of the U280's 8 GB (the fleet's cells at 32: docs/fleet.md)
ENGINE_CONTEXTS = 32

# the devices' totals: the XCU280's from DS890 (UltraScale Architecture and Product Data Sheet:
# Overview): 1,303,680 LUTs, 2,607,360 flip-flops, 9,024 DSP slices, 2,016 36-Kb block RAMs,
# 960 UltraRAMs (data/slr.json has them per SLR, as the shell leaves them); the XCV80's as
# claims (AMD's V80 data sheet, DS1013, not read here): 2,574,208 LUTs, two flip-flops a LUT,
# 10,848 DSP engines and 3,741 36-Kb block RAMs as this project has carried them, and 1,925
# UltraRAMs as issue 41 gives them (it had 1,301, unsourced).
_U280 = Resources(lut=1_303_680, ff=2_607_360, dsp=9_024, bram18k=4_032, uram=960)
_V80 = Resources(lut=2_574_208, ff=5_148_416, dsp=10_848, bram18k=7_482, uram=1_925)
BOARDS: dict[str, FpgaBoard] = {b.name: b for b in (
    FpgaBoard("u280-200", 200e6, U280_HBM, _U280, 45.0,
              "Alveo U280 data sheet (HBM2 8 GB, 460 GB/s); docs/design.md §8: 45 W at 200 MHz"),
    FpgaBoard("u280-300", 300e6, U280_HBM, _U280, 60.0,
              "Alveo U280 data sheet; docs/design.md §8: 60 W at 300 MHz"),
    FpgaBoard("v80", 300e6, V80_HBM, _V80, 120.0,
              "Alveo V80 data sheet (HBM2e 32 GB, 819 GB/s); docs/design.md §8: 120 W"),
)}


@dataclass(frozen=True)
class EdgeGpu:
    """A GPU whose decode is memory bound: bytes per token over the usable bandwidth."""

    name: str
    memory_bandwidth_bytes_per_s: float
    usable_fraction: float
    power_w: float
    source: str


EDGE_GPUS = {g.name: g for g in (
    EdgeGpu("jetson-orin-nano", 68e9, 0.8, 15.0,
            "Jetson Orin Nano 8 GB data sheet: LPDDR5 68 GB/s, 7-15 W"),
)}


def fpga_board(name: str) -> FpgaBoard:
    if name not in BOARDS:
        raise KeyError(f"unknown board {name!r}; choose one of {', '.join(BOARDS)}")
    return BOARDS[name]


def board_power(name: str) -> DevicePower:
    """The board's power for the energy model. One figure per board (an implementation
    report's): the clocks keep running while the design waits, so idle equals active."""
    board = fpga_board(name)
    return DevicePower(board.name, board.power_w, board.power_w,
                       f"{board.source}; idle: assumed equal to active (the design's clocks "
                       "run while it waits; no measurement of the board idle)")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def design_for(config: Qwen2Config | str, board: FpgaBoard | str, *,
               calibration=None, ingest_batch: int = 1) -> DecoderParams:
    """The fastest fitting design for the board (at a 2048-token context); with
    ``ingest_batch`` B > 1, built with a batched ingest of B (its resources those of
    :func:`batched_ingest_resources`)."""
    config = qwen2_config(config) if isinstance(config, str) else config
    board = fpga_board(board) if isinstance(board, str) else board
    checks.power_of_two("ingest_batch", ingest_batch, high=MULTIPLE_LIMIT)
    calibration = calibration or _committed_calibration()
    return _fastest_fitting(config, board, calibration.overheads, ingest_batch)


@functools.cache
def _committed_calibration():
    return load_calibration(CALIBRATION_FILE)


def memory_plan(config: Qwen2Config, board: FpgaBoard, params: DecoderParams, *,
                shared: bool = SHARED_PORTS) -> MemoryPlan:
    """How ``params``'s streams use the board's HBM ports (:func:`.hbm.plan_memory`; the
    boards' designs time-share the ports: :data:`SHARED_PORTS`)."""
    return _memory_plan(board, params.stream_bytes,
                        config.head_dim * params.kv_rows if params.external_kv else 0,
                        params.param_width, shared)


@functools.cache
def _memory_plan(board: FpgaBoard, stream_bytes: int, kv_row_bytes: int,
                 param_width: int, shared: bool) -> MemoryPlan:
    return plan_memory(board.hbm, board.clock_hz, stream_bytes, kv_row_bytes=kv_row_bytes,
                       param_width=param_width, shared=shared)


def core_timing(config: Qwen2Config, board: FpgaBoard, params: DecoderParams,
                overheads, *, shared: bool = SHARED_PORTS) -> CoreTiming:
    """The timing model of ``params`` on ``board``: its memory's latency, the weight
    stream's sustained beats a cycle from the board's memory plan, and whether the other
    streams borrow the weights' ports."""
    plan = memory_plan(config, board, params, shared=shared)
    return CoreTiming(config, params, board.memory_latency_cycles, overheads,
                      stream_beats_per_cycle=plan.weight_beats_per_cycle,
                      shared_ports=plan.shared)


@functools.cache
def _fastest_fitting(config: Qwen2Config, board: FpgaBoard, overheads,
                     ingest_batch: int = 1) -> DecoderParams:
    group = config.heads // config.kv_heads
    fitting = []
    refused = None  # the design refused per SLR with the fewest excesses, and they
    widths = [v for v in (1, 2, 4, 8, 16, 32)
              if config.ffn % v == 0 and (config.head_dim // 2) % v == 0]
    for lanes, k in itertools.product(_divisors(config.hidden), ROWS_PER_BEAT):
        if lanes < 32:
            continue
        beat = lanes * k
        for stream_bytes, v, buffer, gains, kv_rows in itertools.product(
                _divisors(beat), widths, WEIGHT_BUFFERS, widths, KV_ROWS):
            if stream_bytes < beat // 4 or lanes % v or v % gains or gains % k:
                continue
            params = DecoderParams(lanes, stream_bytes, heads_parallel=group,
                                   weight_buffer=buffer, vector_width=v, param_width=gains,
                                   rows_per_beat=k, external_kv=True, kv_rows=kv_rows)
            try:
                params.check_model(config)  # (k must divide every matrix's rows)
            except ValueError:
                continue
            resources = batched_ingest_resources(config, params, ingest_batch)
            if not resources.fits(board.resources):
                continue
            plan = place_binding_units(config, params, board.name, ingest_batch)  # per SLR
            if plan is not None and not plan.fits:
                refused = min(refused or (params, plan.over), (params, plan.over),
                              key=lambda r: len(r[1]))
                continue
            params = replace(params, ingest_batch=ingest_batch)
            try:
                timing = core_timing(config, board, params, overheads)
            except HbmError:
                continue  # a stream the board's ports cannot carry
            # a token takes at least its weight stream at the ports' rate: a design whose
            # stream alone is slower than the fastest found (by more than the 0.1 % below)
            # is never chosen, and is not priced
            bound = timing.weight_stream_beats() / timing.stream_beats_per_cycle
            fitting.append((bound, resources, params, timing))
    if not fitting:
        built = f" with a batched ingest of {ingest_batch}" if ingest_batch > 1 else ""
        nearest = "" if refused is None else (f"; the nearest ({refused[0].lanes} lanes x "
            f"{refused[0].rows_per_beat} rows, {refused[0].kv_rows} KV rows a cycle) breaks its "
            "SLRs' guidelines: " + "; ".join(refused[1]))
        raise ValueError(f"no design for {config.name}{built} fits {board.name}{nearest}")
    fitting.sort(key=lambda f: f[0])
    candidates, fastest = [], math.inf
    for bound, resources, params, timing in fitting:
        if bound > fastest * 1.001:
            break
        cycles = timing.token_cycles(min(2048, config.max_context - 1))
        fastest = min(fastest, cycles)
        candidates.append((cycles, resources.bram18k, resources.dsp, params))
    # the fastest; of the designs within 0.1 % of it, the one fastest at the margin clock (the
    # board's clock may not close: a design that holds its speed a step below is the safer
    # build), then the one with the fewest block RAMs and DSP slices
    fastest = min(c[0] for c in candidates)
    margin = replace(board, clock_hz=board.clock_hz * MARGIN_CLOCK_RATIO)
    context = min(2048, config.max_context - 1)

    def at_margin(params):
        return core_timing(config, margin, params, overheads).token_cycles(context)

    near = [c for c in candidates if c[0] <= fastest * 1.001]
    return min(near, key=lambda c: (round(at_margin(c[3])), *c[1:3]))[3]


def draft_ms_per_token(model: str | Qwen2Config, board: str | FpgaBoard, context: int, *,
                       keep_logits: bool = True, ingest_batch: int = 1) -> float:
    """Draft milliseconds per decode token of ``model`` on ``board`` after ``context`` tokens
    (the RTL-calibrated timing of the board's design, built with ``ingest_batch``)."""
    config = qwen2_config(model) if isinstance(model, str) else model
    board = fpga_board(board) if isinstance(board, str) else board
    checks.integer("context", context, low=0, high=config.max_context - 1, note=config.name)
    calibration = _committed_calibration()
    params = design_for(config, board, calibration=calibration, ingest_batch=ingest_batch)
    cycles = core_timing(config, board, params, calibration.overheads).token_cycles(
        context, keep_logits=keep_logits)
    return cycles_to_ms(cycles, board.clock_hz)


def batched_ingest_ms(model: str | Qwen2Config, board: str | FpgaBoard, context: int,
                      tokens: int, *, batch: int) -> float:
    """Milliseconds to ingest ``tokens`` host tokens after ``context`` in batches of ``batch``
    (a power of two; the last batch shorter if need be) on the board's design built with
    ``ingest_batch=batch`` (:meth:`~heteroreason.model.timing.fpga.core_cycles.CoreTiming.
    batch_cycles`)."""
    config = qwen2_config(model) if isinstance(model, str) else model
    board = fpga_board(board) if isinstance(board, str) else board
    for name, value in (("tokens", tokens), ("batch", batch)):
        checks.integer(name, value, low=1)
    checks.integer("context", context, low=0, high=config.max_context - tokens,
                   note=f"{tokens} tokens of {config.name}")
    calibration = _committed_calibration()
    params = design_for(config, board, calibration=calibration, ingest_batch=batch)
    timing = core_timing(config, board, params, calibration.overheads)
    cycles = sum(timing.batch_cycles(start, min(batch, context + tokens - start))
                 for start in range(context, context + tokens, batch))
    return cycles_to_ms(cycles, board.clock_hz)


@functools.cache
def draft_timing(board: str, model: str = "qwen2.5-0.5b", *, ingest_batch: int = 1) -> LlmTiming:
    """The board's RTL-calibrated draft timing in the scheduler's form: a floor and a line in
    the context (a token costs the larger), fitted to :func:`draft_ms_per_token` at 64
    contexts over the model's range: the floor is the token at context 0 (a design bound by
    its weight stream costs the same until its attention grows past that), the line a
    least-squares fit over the longer contexts (the split that fits all 64 best); the ingest
    (shadow-synchronisation) cost from the token without its LM head (see
    :class:`~heteroreason.model.timing.device_timing.LlmTiming`), over contexts up to 4096.
    The line is exact where the design is compute bound (its attention is linear in the
    context); the fit's largest deviation from the timing model is stated in ``source``.

    With ``ingest_batch`` B > 1 the design is the fastest built with a batched ingest (its
    resources :func:`batched_ingest_resources`; its decode its own) and a host token's ingest
    costs a B-th of a pass of B (:func:`batched_ingest_ms`): the floor at context 0, and the
    line (its own slope: a pass runs its tokens' attention one after the other, with less of
    it hidden behind the weight stream than a token's) fitted by least squares to the passes
    above the floor. (Host tokens come in whole batches but
    for a run's last, which the per-token price slightly undercharges.)"""
    config = qwen2_config(model)
    fpga_board(board)
    checks.power_of_two("ingest_batch", ingest_batch, high=MULTIPLE_LIMIT)
    timing = _decode_line(board, config, ingest_batch)
    return timing if ingest_batch == 1 else _batched_ingest(timing, board, config, ingest_batch)


def _decode_line(board: str, config: Qwen2Config, batch: int) -> LlmTiming:
    """:func:`draft_timing`'s floor and line of the design built with ``ingest_batch=batch``
    (its ingest a token at a time)."""
    last = min(config.max_context, 4096) - 1
    contexts = [round(k * last / 63) for k in range(64)]
    ms = [draft_ms_per_token(config, board, n, ingest_batch=batch) for n in contexts]
    floor = ms[0]

    def fit(points):
        xs, ys = zip(*points, strict=True)
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / \
            sum((x - mean_x) ** 2 for x in xs)
        return mean_y - slope * mean_x, slope

    def worst(line):
        intercept, slope = line
        return max(abs(max(floor, intercept + slope * n) - t) / t
                   for n, t in zip(contexts, ms, strict=True))

    lines = [fit(list(zip(contexts[k:], ms[k:], strict=True))) for k in range(0, 62)]
    intercept, slope = min(lines, key=worst)
    head_ms = ms[0] - draft_ms_per_token(config, board, 0, keep_logits=False,
                                         ingest_batch=batch)  # the LM head
    # a token at context n attends to kv = n + 1 entries, itself included: the scheduler's
    # convention (LlmTiming.decode_ms)
    timing = LlmTiming(f"fpga/rtl-{board}", config.name, board,
                       decode_ms_per_token=intercept - slope, decode_ms_per_kv_token=slope,
                       ingest_ms_per_token=max(0.0, intercept - slope - head_ms),
                       decode_floor_ms_per_token=floor, ingest_floor_ms_per_token=floor - head_ms)
    ingest_worst = max(abs(timing.ingest_ms(1, n) / draft_ms_per_token(
        config, board, n, keep_logits=False, ingest_batch=batch) - 1) for n in contexts)
    return timing.with_(source=f"RTL-calibrated timing model, design "
                               f"{design_for(config, board, ingest_batch=batch)}; floor and "
                               f"line fit within "
                               f"{100 * worst((intercept, slope)):.2f} % (ingest "
                               f"{100 * ingest_worst:.2f} %)")


def _batched_ingest(single: LlmTiming, board: str, config: Qwen2Config,
                    batch: int) -> LlmTiming:
    """``single`` (the decode line of the design built with ``ingest_batch=batch``) with the
    ingest of its passes of ``batch``."""
    last = min(config.max_context, 4096) - batch
    contexts = [round(k * last / 63) for k in range(64)]
    # a token's share of a pass of ``batch`` at each context (its tokens at n .. n + batch - 1)
    shares = [batched_ingest_ms(config, board, n, batch, batch=batch) / batch for n in contexts]
    floor = shares[0]
    # the scheduler charges a token at n with n + 1 entries: the pass's mean token attends to
    # n + (batch + 1) / 2
    lined = [(n + (batch + 1) / 2, t) for n, t in zip(contexts, shares, strict=True)
             if t > floor * 1.001]
    slope, intercept = single.decode_ms_per_kv_token, floor
    if len(lined) >= 2:
        mean_x = sum(x for x, _ in lined) / len(lined)
        mean_y = sum(y for _, y in lined) / len(lined)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in lined) / \
            sum((x - mean_x) ** 2 for x, _ in lined)
        intercept = mean_y - slope * mean_x
    timing = single.with_(ingest_ms_per_token=max(0.0, intercept), ingest_floor_ms_per_token=floor,
                          ingest_ms_per_kv_token=max(0.0, slope))
    worst = max(abs(timing.ingest_ms(batch, n) / (batch * t) - 1)
                for n, t in zip(contexts, shares, strict=True))
    return timing.with_(name=f"{single.name}-batch{batch}",
                        source=f"{single.source}; ingest in passes of {batch} (design built "
                               f"with ingest_batch={batch}), a token's share of a pass fit "
                               f"within {100 * worst:.2f} %")


def edge_gpu_ms_per_token(model: str | Qwen2Config, gpu: str, context: int) -> float:
    """Memory-bound decode on an edge GPU: weight and KV bytes over the usable bandwidth."""
    config = qwen2_config(model) if isinstance(model, str) else model
    if gpu not in EDGE_GPUS:
        raise KeyError(f"unknown GPU {gpu!r}; choose one of {', '.join(EDGE_GPUS)}")
    g = EDGE_GPUS[gpu]
    counts = config.decode_counts(context)
    bytes_per_token = counts.weight_bytes + counts.kv_bytes_read + counts.kv_bytes_written
    return 1000.0 * bytes_per_token / (g.memory_bandwidth_bytes_per_s * g.usable_fraction)
