"""The decoder's operator table: the one definition of what a token runs, in order.

A token runs the embedding, then every layer's fourteen operators (the layer counter steps
through them ``layers`` times), then the final norm and — when its logits are kept — the LM
head. Each :class:`Operator` names the unit that runs it, the weight and parameter regions it
consumes (their order here *is* the order of the weight and parameter images,
:func:`~heteroreason.rtl.decoder.decode_schedule.decode_schedule`), the scratchpad buffers it
reads and writes and, for a matrix-vector product, its shape. The RTL sequencer
(:class:`~heteroreason.rtl.decoder.core.DecoderCore`) runs operator ``k`` when its program
counter is ``k``; the cycle model (:mod:`heteroreason.model.timing.fpga.core_cycles`) prices
the same list; the waveform reader names program counters by it. The table is plain data
(no HDL), so that the timing model can read it without loading Amaranth.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["FINAL_OPERATORS", "LAYER_OPERATORS", "OPERATORS", "Operator", "Sink", "Unit",
           "first_layer_pc", "last_layer_pc", "lm_head_pc"]


class Unit(enum.Enum):
    """The part of the core that runs an operator."""

    EMBED = "embed"  # the token's embedding row, requantized into the residual
    NORM = "norm"  # RMSNorm of the residual
    MATVEC = "matvec"  # the matrix-vector unit
    ROPE = "rope"  # rotary position embedding, in place
    KV_WRITE = "kv_write"  # the token's K and V rows into the KV cache
    ATTENTION = "attention"  # every query head against its KV head's cache
    SILU_TABLE = "silu_table"  # the layer's 256-entry SiLU table into the SwiGLU unit


class Sink(enum.Enum):
    """Where a matrix-vector product's outputs go."""

    STORE = "store"  # into a scratchpad buffer
    ADD = "add"  # added into the residual, saturated to 16 bits
    SWIGLU = "swiglu"  # through SwiGLU with the gate buffer, into the activation buffer
    SAMPLE = "sample"  # into the argmax sampler


@dataclass(frozen=True)
class Operator:
    """One step of a token.

    ``weights`` / ``params``: the regions of the weight and parameter images it consumes
    (names within a layer for per-layer operators). ``src`` / ``dst``: scratchpad buffers
    (``r`` residual, ``h`` normed, ``q``, ``k``, ``v``, ``a`` attention output, ``g`` gate,
    ``x`` activation). ``cols`` / ``rows``: the matrix-vector shape, as names of
    :class:`~heteroreason.model.spec.numerics.qwen2_config.Qwen2Config` sizes; ``heads`` likewise
    for RoPE (``heads`` or ``kv_heads``). ``out_bits``: the saturation width of a product's
    results (8, 16 or 32). ``reuse``: the product reuses the vector of the one
    before it.
    """

    name: str
    unit: Unit
    per_layer: bool
    weights: str | None = None
    params: str | None = None
    src: str | None = None
    dst: str | None = None
    cols: str | None = None
    rows: str | None = None
    out_bits: int | None = None
    sink: Sink | None = None
    reuse: bool = False
    heads: str | None = None


def _linear(name, src, cols, rows, out_bits, sink, dst=None, *, reuse=False, per_layer=True,
            weights=None):
    return Operator(name, Unit.MATVEC, per_layer, weights=weights or name,
                    params=(weights or name) + ".params", src=src, dst=dst, cols=cols,
                    rows=rows, out_bits=out_bits, sink=sink, reuse=reuse)


EMBED = Operator("embed", Unit.EMBED, False, weights="embed", params="embed_params", dst="r")
LAYER_OPERATORS: tuple[Operator, ...] = (
    Operator("input_norm", Unit.NORM, True, params="norm1", src="r", dst="h"),
    _linear("q_proj", "h", "hidden", "q_dim", 8, Sink.STORE, "q"),
    _linear("k_proj", "h", "hidden", "kv_dim", 8, Sink.STORE, "k", reuse=True),
    _linear("v_proj", "h", "hidden", "kv_dim", 8, Sink.STORE, "v", reuse=True),
    Operator("rope_q", Unit.ROPE, True, src="q", dst="q", heads="heads"),
    Operator("rope_k", Unit.ROPE, True, src="k", dst="k", heads="kv_heads"),
    Operator("kv_write", Unit.KV_WRITE, True, src="k"),
    Operator("attention", Unit.ATTENTION, True, src="q", dst="a"),
    _linear("o_proj", "a", "q_dim", "hidden", 16, Sink.ADD, "r"),
    Operator("post_attention_norm", Unit.NORM, True, params="norm2", src="r", dst="h"),
    _linear("gate_proj", "h", "hidden", "ffn", 8, Sink.STORE, "g"),
    Operator("silu_table", Unit.SILU_TABLE, True, params="silu"),
    _linear("up_proj", "h", "hidden", "ffn", 8, Sink.SWIGLU, "x", reuse=True),
    _linear("down_proj", "x", "ffn", "hidden", 16, Sink.ADD, "r"),
)
FINAL_OPERATORS: tuple[Operator, ...] = (
    Operator("final_norm", Unit.NORM, False, params="final_norm", src="r", dst="h"),
    _linear("lm_head", "h", "hidden", "vocab", 32, Sink.SAMPLE, per_layer=False),
)
# the program: index = the sequencer's program counter
OPERATORS: tuple[Operator, ...] = (EMBED, *LAYER_OPERATORS, *FINAL_OPERATORS)


def first_layer_pc() -> int:
    return OPERATORS.index(LAYER_OPERATORS[0])


def last_layer_pc() -> int:
    return OPERATORS.index(LAYER_OPERATORS[-1])


def lm_head_pc() -> int:
    return len(OPERATORS) - 1


def token_operators(layers: int, *, keep_logits: bool) -> list[tuple[int, Operator]]:
    """``(layer, operator)`` of one token in the order the core runs them (layer -1 for the
    operators outside the layers)."""
    out = [(-1, EMBED)]
    out += [(layer, op) for layer in range(layers) for op in LAYER_OPERATORS]
    out += [(-1, op) for op in FINAL_OPERATORS if keep_logits or op.sink is not Sink.SAMPLE]
    return out
