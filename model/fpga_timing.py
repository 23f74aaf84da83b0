"""Analytic timing model of the DraftEngine's decoder core (:mod:`heteroreason.rtl.decoder_core`),
operator by operator as the RTL runs them, with constants fitted from RTL simulation
(:mod:`heteroreason.model.calibration`).

One token is the RTL's operator sequence — embedding; per layer norm, q/k/v, RoPE of q and k,
KV write, attention, o, norm, gate, SiLU table, up (with SwiGLU), down; final norm; LM head when
the logits are kept — each with the cycles its unit needs (scratchpad rows of ``vector_width``
elements on the vector paths, one a cycle where each element needs its own parameter, rows x
beats, ``3 T`` per attention job, ...) plus a fitted per-operator overhead. The weight stream
is modelled as the RTL has it: after the request latency it delivers one stream beat a cycle
into a prefetch buffer (``weight_buffer`` matrix-vector beats) until the buffer is full; a
matrix-vector operator takes ``lanes // stream_bytes`` stream beats a cycle while the buffer has
them, and waits on the stream when it does not. So the model is stream-bound or compute-bound
exactly where the RTL is.

All times are cycles; :meth:`CoreTiming.token_cycles` is the one entry point, and
:func:`cycles_to_ms` turns cycles into milliseconds at a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from heteroreason.model.qwen2_config import Qwen2Config

__all__ = ["OVERHEADS", "CoreParams", "CoreTiming", "Overheads", "cycles_to_ms"]


@dataclass(frozen=True)
class CoreParams:
    """The RTL's parameterization (see :class:`~heteroreason.rtl.decoder_core.DecoderCore`) and
    the memory it reads from."""

    lanes: int
    stream_bytes: int
    heads_parallel: int = 1
    weight_buffer: int = 1024
    external_kv: bool = False
    memory_latency_cycles: int = 0
    vector_width: int = 1

    def __post_init__(self):
        for name in ("lanes", "stream_bytes", "heads_parallel", "weight_buffer", "vector_width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.lanes % self.stream_bytes:
            raise ValueError(f"stream_bytes ({self.stream_bytes}) must divide lanes "
                             f"({self.lanes})")
        v = self.vector_width
        if v & (v - 1) or self.lanes % v:
            raise ValueError(f"vector_width must be a power of two that divides lanes "
                             f"({self.lanes}), not {v!r}")
        if isinstance(self.memory_latency_cycles, bool) or \
                not isinstance(self.memory_latency_cycles, int) or self.memory_latency_cycles < 0:
            raise ValueError("memory_latency_cycles must be a non-negative integer, not "
                             f"{self.memory_latency_cycles!r}")

    @property
    def ratio(self) -> int:
        return self.lanes // self.stream_bytes


@dataclass(frozen=True)
class Overheads:
    """Fixed cycles per operator beyond its unit's element, row and beat counts. The defaults
    are a calibration's rounded values; the committed calibration file holds the fitted ones."""

    first_beat: float = 5.0  # from the token to its first weight beat, beyond the latency
    embed: float = 28.0
    norm: float = 49.0  # the divider's 48 cycles and the table
    vector_load: float = 0.0
    matvec: float = 0.0
    rope: float = 44.0
    kv_write: float = 17.5
    attention_job: float = 48.0  # the 47-cycle reciprocal and the command
    silu_table: float = 11.5
    tail: float = 0.0

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


OVERHEADS = Overheads()


def _check_config(config: Qwen2Config, params: CoreParams) -> None:
    if config.hidden % params.lanes:
        raise ValueError(f"lanes ({params.lanes}) must divide the hidden size ({config.hidden})")
    group = config.heads // config.kv_heads
    if group % params.heads_parallel:
        raise ValueError(f"heads_parallel ({params.heads_parallel}) must divide the query heads "
                         f"per KV head ({group})")
    v = params.vector_width
    if config.ffn % v or (config.head_dim // 2) % v:
        raise ValueError(f"vector_width ({v}) must divide the FFN size ({config.ffn}) and half "
                         f"the head size ({config.head_dim // 2})")


@dataclass(frozen=True)
class CoreTiming:
    """Cycles of the decoder core for a model and a parameterization."""

    config: Qwen2Config
    params: CoreParams
    overheads: Overheads = OVERHEADS

    def __post_init__(self):
        _check_config(self.config, self.params)

    def operators(self, position: int, *, keep_logits: bool = True) -> list[tuple]:
        """``(name, compute cycles, matrix-vector beats)`` of one token at ``position``, in the
        RTL's order; the compute cycles of a matrix-vector operator are its vector load."""
        c, p, o = self.config, self.params, self.overheads
        if isinstance(position, bool) or not isinstance(position, int) or \
                not 0 <= position < c.max_context:
            raise ValueError(f"position must be in [0, {c.max_context}) (the model's context), "
                             f"not {position!r}")
        lanes, hd, v = p.lanes, c.head_dim, p.vector_width

        def beats(cols):
            return -(-cols // lanes)

        def load(cols):  # a scratchpad row a cycle, then the beat handed over
            return beats(cols) * (lanes // v + 1) + o.vector_load

        norm = c.hidden // v + c.hidden + o.norm  # rows in, elements out
        length = position + 1
        jobs = c.heads // p.heads_parallel
        attention = jobs * (p.heads_parallel * (hd // v + 1) + 3 * length
                            + p.heads_parallel * hd // v + o.attention_job)
        if p.external_kv:
            attention += jobs * p.memory_latency_cycles
        layer = [
            ("norm", norm, 0),
            ("q_proj", load(c.hidden), c.q_dim * beats(c.hidden)),
            ("k_proj", o.vector_load, c.kv_dim * beats(c.hidden)),
            ("v_proj", o.vector_load, c.kv_dim * beats(c.hidden)),
            ("rope_q", 2 * c.heads * hd // v + o.rope, 0),  # each head in, then out
            ("rope_k", 2 * c.kv_heads * hd // v + o.rope, 0),
            ("kv_write", c.kv_heads * (2 * hd // v + 1) + o.kv_write, 0),
            ("attention", attention, 0),
            ("o_proj", load(c.q_dim), c.hidden * beats(c.q_dim)),
            ("norm", norm, 0),
            ("gate_proj", load(c.hidden), c.ffn * beats(c.hidden)),
            ("silu_table", 256 + o.silu_table, 0),
            ("up_proj", o.vector_load, c.ffn * beats(c.hidden)),
            ("down_proj", load(c.ffn), c.hidden * beats(c.ffn)),
        ]
        ops = [("embed", c.hidden + beats(c.hidden) + o.embed, 0)]
        ops += layer * c.layers
        ops.append(("norm", norm, 0))
        if keep_logits:
            ops.append(("lm_head", load(c.hidden), c.vocab * beats(c.hidden)))
        return ops

    def weight_stream_beats(self, *, keep_logits: bool = True) -> int:
        """Stream beats of one token: the weight bytes over the stream width."""
        mv = sum(w for _, _, w in self.operators(0, keep_logits=keep_logits))
        return (mv + -(-self.config.hidden // self.params.lanes)) * self.params.ratio

    def token_cycles(self, position: int, *, keep_logits: bool = True) -> float:
        """Cycles from taking a token at ``position`` to being done with it (its sample out)."""
        p, o = self.params, self.overheads
        r = p.ratio
        cap = p.weight_buffer * r  # stream beats the buffer holds
        total = self.weight_stream_beats(keep_logits=keep_logits)
        first = p.memory_latency_cycles + r + o.first_beat  # the first stream beat
        t = 0.0
        delivered = consumed = 0.0  # stream beats

        def stream(until: float) -> None:
            nonlocal delivered
            active = max(0.0, until - max(t, first))
            delivered = min(delivered + active, consumed + cap, total)

        for name, compute, mv_beats in self.operators(position, keep_logits=keep_logits):
            if name == "embed":  # its row is the stream's first data
                rows = -(-self.config.hidden // p.lanes) * r
                start = max(t, first + rows)
                stream(start)
                t = start
                consumed += rows
                stream(t + compute)
                t += compute
                continue
            stream(t + compute)
            t += compute
            if not mv_beats:
                continue
            need = mv_beats * r
            if t < first:  # nothing has arrived yet
                stream(first)
                t = first
            duration = max(float(mv_beats), need - (delivered - consumed)) + o.matvec
            consumed += need  # the buffer frees as it drains: the stream runs on meanwhile
            stream(t + duration)
            delivered = max(delivered, consumed)
            t += duration
        return t + o.tail

    def with_overheads(self, overheads: Overheads) -> CoreTiming:
        return CoreTiming(self.config, self.params, overheads)


def cycles_to_ms(cycles: float, clock_hz: float) -> float:
    if not clock_hz > 0:
        raise ValueError(f"clock_hz must be positive, not {clock_hz!r}")
    return 1000.0 * cycles / clock_hz
