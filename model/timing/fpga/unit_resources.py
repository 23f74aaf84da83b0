"""The units that bind a board's SLRs, counted from their structure: the matrix-vector unit's and
the attention's DSP slices (a slice per int8 product or packed pair of them, and per 17-bit
piece product of a requantizer, as the RTL builds them), the weight buffer's and the attention
memories' block RAM and UltraRAM (as Yosys maps a memory). The design search places these three
units on the board's SLRs (:func:`~heteroreason.model.timing.fpga.floorplan.place`: the MVU and
its buffer beside the HBM, the attention's scores and its weighted values, ``att`` and
``att.pv``, each whole in one SLR) and refuses a design where they do
not keep within the failfast guidelines (their LUTs too, from :mod:`.unit_logic`). The other
units are checked against the whole device only (:func:`~heteroreason.model.timing.fpga.resources.
estimate_resources`); a synthesized design's full floorplan is ``heteroreason fit``.

Checked against synthesis (``tests/model/timing/fpga/test_unit_resources.py``): the DSP forms
give the synthesized units' counts exactly (the committed fit evidence: the small core, and
the U280 design's full-width core of RTL 7117a70c3394, 3,608 and 3,844 before the packing),
the memory mapping the synthesized weight buffer's 399 UltraRAMs and the attention's 48.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config
from heteroreason.model.timing.fpga.floorplan import Floorplan, board_floor, place
from heteroreason.model.timing.fpga.unit_logic import unit_logic
from heteroreason.rtl.decoder.attention import score_bits
from heteroreason.rtl.decoder.attention_memory import kv_cache_rows
from heteroreason.rtl.decoder.params import DecoderParams

__all__ = ["attention_dsp", "binding_units", "core_dsp", "core_memories", "memory_blocks",
           "mvu_dsp", "place_binding_units", "requantizer_dsp"]

# Yosys 0.23's block RAM and UltraRAM for UltraScale+ (techlibs/xilinx brams_xcu.txt and
# urams.txt, which memory_libmap prices): each kind's cost and its (width, depth) shapes. A
# memory takes the cheapest array of one shape, ``k`` words side by side in a row when that is
# cheaper (a power of two)
_BLOCKS = (
    ("bram18k", 1, 129, ((1, 16384), (2, 8192), (4, 4096), (9, 2048), (18, 1024), (36, 512))),
    ("bram18k", 2, 257, ((1, 32768), (2, 16384), (4, 8192), (9, 4096), (18, 2048), (36, 1024),
                         (72, 512))),
    ("uram", 1, 1024, ((72, 4096),)),
)
PIECE_BITS = 17  # a requantizer's operands are cut in 17-bit pieces (pipeline.py)
MULT_BITS = 31  # a requantizer's multiplier


@functools.lru_cache(maxsize=4096)
def memory_blocks(width_bits: int, depth: int, granularity: int | None = None
                  ) -> tuple[int, int]:
    """``(bram18k, uram)`` of one memory of ``depth`` words of ``width_bits``, as Yosys maps a
    memory of one write and one read port (a RAMB36 counts as two 18-Kbit blocks); with a write
    enable a ``granularity`` of bits, a block holds whole elements (an element wider than a
    block's word takes several)."""
    checks.integer("width_bits", width_bits, low=1)
    checks.integer("depth", depth, low=1)
    best = None
    for kind, per_block, cost, shapes in _BLOCKS:
        for width, deep in shapes:
            k = 1
            while k <= depth:
                if granularity is None:
                    columns = -(-k * width_bits // width)
                else:
                    elements = k * width_bits // granularity
                    columns = elements * -(-granularity // width) if width < granularity \
                        else -(-elements // (width // granularity))
                n = columns * -(-depth // (k * deep))
                if best is None or n * cost < best[0]:
                    best = (n * cost, kind, n * per_block)
                k *= 2
    _, kind, n = best
    return (n, 0) if kind == "bram18k" else (0, n)


def requantizer_dsp(acc_bits: int) -> int:
    """DSP slices of one requantizer of an ``acc_bits`` accumulator: a slice per pair of 17-bit
    pieces of the accumulator and the 31-bit multiplier."""
    return math.ceil(acc_bits / PIECE_BITS) * math.ceil(MULT_BITS / PIECE_BITS)


def mvu_dsp(params: DecoderParams, batch: int = 1) -> int:
    """DSP slices of the matrix-vector unit with ``batch`` vectors: its products (two vectors
    share a slice and its weight; with one vector, two rows' weights share one and the vector's
    element: :data:`~heteroreason.rtl.decoder.mvu.PACKED_LOW_BITS`) and a 48-bit requantizer a
    row and vector."""
    checks.integer("batch", batch, low=1)
    k = params.rows_per_beat
    products = params.beat_bytes * math.ceil(batch / 2) if batch > 1 else \
        params.lanes * math.ceil(k / 2)
    return products + requantizer_dsp(48) * k * batch


def attention_dsp(*, head_dim: int, heads: int, kv_rows: int, width: int) -> dict[str, int]:
    """DSP slices of the attention's two units: ``att``, the scores (two KV rows share a slice
    and the query's element when there are several) and each head's and row's exponential's
    requantizer; ``att.pv``, the probability-weighted values (a 17-bit probability times an
    int8 value: no room for a second), each head's and row's probability (three partial
    products) and an output requantizer a lane."""
    rows = kv_rows if kv_rows == 1 else kv_rows // 2
    scores = heads * head_dim * rows
    values = heads * head_dim * kv_rows
    return {"att": scores + requantizer_dsp(score_bits(head_dim) + 1) * heads * kv_rows,
            "att.pv": values + 3 * heads * kv_rows + requantizer_dsp(32) * width}


def core_dsp(config: Qwen2Config, params: DecoderParams, batch: int = 1) -> int:
    """DSP slices of a decoder core built with ``batch`` vectors a pass: the matrix-vector unit
    and the attention (above); RMSNorm a squarer a vector lane and 8 a gain lane (its two
    scaling products and requantizer); RoPE 4 a vector lane (a phase, two rotations and a
    requantizer); SwiGLU 5 a lane (``rows_per_beat`` a vector); 2 in the top's glue."""
    v = params.vector_width
    return (mvu_dsp(params, batch)
            + sum(attention_dsp(head_dim=config.head_dim, heads=params.heads_parallel,
                                kv_rows=params.kv_rows, width=v).values())
            + v + 8 * params.param_width + 4 * v + 5 * params.rows_per_beat * batch + 2)


def core_memories(config: Qwen2Config, params: DecoderParams, batch: int = 1
                  ) -> tuple[int, int]:
    """``(bram18k, uram)`` of a decoder core built with ``batch`` vectors a pass: the binding
    units' memories, the parameter buffer (``param_buffer`` beats of 69-bit entries), RoPE's
    tables (a block a vector lane), SwiGLU's (one a lane: ``rows_per_beat`` a vector) and the
    scratchpad a token (its 16-bit elements ``vector_width`` a row, written element by element,
    read by two readers: two copies)."""
    units = binding_units(config, params, batch)
    pbuf = memory_blocks(69 * params.param_width, params.param_buffer)
    c, v = config, params.vector_width
    rows = (2 * c.hidden + 2 * c.q_dim + 2 * c.kv_dim + 2 * c.ffn) // v
    scratch = memory_blocks(16 * v, rows, 16)
    bram = (sum(u["bram18k"] for u in units.values()) + pbuf[0] + v
            + params.rows_per_beat * batch + 2 * batch * scratch[0])
    uram = sum(u["uram"] for u in units.values()) + pbuf[1] + 2 * batch * scratch[1]
    return bram, uram


def binding_units(config: Qwen2Config, params: DecoderParams,
                  batch: int = 1) -> dict[str, dict[str, int]]:
    """The binding units' LUTs and flip-flops (:func:`~.unit_logic.unit_logic`), DSP slices,
    18-Kbit block RAMs and UltraRAMs: ``mvu``, ``wbuf`` (the
    weight buffer: ``weight_buffer`` beats), ``att`` (its memories: the scores, a half a
    stage, and the exponentials; the KV cache when it is on chip) and ``att.pv``."""
    nh, nr, hd = params.heads_parallel, params.kv_rows, config.head_dim
    wbuf = memory_blocks(params.beat_bytes * 8, params.weight_buffer)
    groups = config.max_context // nr
    memories = [memory_blocks(score_bits(hd) * nh * nr, 2 << (groups - 1).bit_length()),
                memory_blocks(16 * nh * nr, groups)]
    if not params.external_kv:
        rows = kv_cache_rows(layers=config.layers, kv_heads=config.kv_heads,
                             max_context=config.max_context, contexts=params.contexts)
        memories += [memory_blocks(8 * hd * nr, rows // nr)] * 2
    att = attention_dsp(head_dim=hd, heads=nh, kv_rows=nr, width=params.vector_width)
    units = {
        "mvu": {"dsp": mvu_dsp(params, batch), "bram18k": 0, "uram": 0},
        "wbuf": {"dsp": 0, "bram18k": wbuf[0], "uram": wbuf[1]},
        "att": {"dsp": att["att"], "bram18k": sum(b for b, _ in memories),
                "uram": sum(u for _, u in memories)},
        "att.pv": {"dsp": att["att.pv"], "bram18k": 0, "uram": 0},
    }
    logic = unit_logic(config, params, batch)
    for name, unit in units.items():
        unit["lut"], unit["ff"] = logic[name]
    return units


@functools.cache
def _floor(board: str):
    return board_floor(board)


def place_binding_units(config: Qwen2Config, params: DecoderParams, board: str,
                        batch: int = 1) -> Floorplan | None:
    """The binding units placed on ``board``'s SLRs (None when the board has no SLR data): its
    ``fits`` says whether each SLR keeps within the guidelines, ``over`` what does not."""
    floor = _floor(board)
    if floor is None:
        return None
    units: Mapping[str, Mapping[str, int]] = binding_units(config, params, batch)
    return place(floor, units, {})
