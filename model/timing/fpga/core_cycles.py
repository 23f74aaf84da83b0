"""Analytic timing model of the DraftEngine's decoder core (:mod:`heteroreason.rtl.decoder.core`),
operator by operator as the RTL runs them, with constants fitted from RTL simulation
(:mod:`heteroreason.model.timing.fpga.calibration`).

One token is the RTL's operator table (:data:`heteroreason.rtl.decoder.operators.OPERATORS`) —
embedding; per layer norm, q/k/v, RoPE of q and k, KV write, attention, o, norm, gate, SiLU table,
up (with SwiGLU), down; final norm; LM head when the logits are kept — each with the cycles its unit
needs (scratchpad rows of ``vector_width`` elements on the vector paths, ``param_width`` a cycle
where each element needs its own parameter, rows x beats, the attention unit's own job cycles,
...) plus a fitted per-operator overhead. The weight stream is modelled as the RTL has it:
after the request latency it delivers ``stream_beats_per_cycle`` stream beats a cycle (one
where the board's memory keeps up, less where its HBM ports cannot:
:mod:`~heteroreason.model.timing.fpga.hbm`) into a prefetch buffer (``weight_buffer``
matrix-vector beats) until the buffer is full; a matrix-vector operator takes ``lanes *
rows_per_beat // stream_bytes`` stream beats a cycle (a beat of ``rows_per_beat`` rows) while the
buffer has them, and waits on the stream when it does not. So the model is stream-bound or
compute-bound exactly where the RTL is.

With ``shared_ports`` (the memory plan's time-shared ports, :func:`~heteroreason.model.timing.
fpga.hbm.plan_memory`) the parameters and the KV cache's rows and writes travel on the weight
stream's ports: a matrix-vector operator's row parameters are read with its weights, as if
interleaved into them (more stream beats to wait for); the other operators' bytes (a norm's
gains, the SiLU table, the KV rows an attention reads and the KV write stores) are a debt the
stream pays, in stream beats, before it delivers weights again, out of time the ports would
otherwise spend on weights (free while the weight buffer is full: the ports would idle). The
testbench's :class:`~heteroreason.sim.verify.tb.shared_ports.SharedPorts` serves the RTL so.

All times are cycles; :meth:`CoreTiming.token_cycles` is the entry point for the core as
built, and :func:`cycles_to_ms` turns cycles into milliseconds at a clock.

:meth:`CoreTiming.batch_cycles` prices a batched ingest (``DecoderParams.ingest_batch``): several
tokens on one pass of the weights, each matrix-vector beat meeting every token's vector, the
other operators token by token, with the single-token core's calibrated overheads.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config
from heteroreason.rtl.decoder.attention import HANDOFF_CYCLES, back_cycles, score_latency
from heteroreason.rtl.decoder.attention import job_cycles as attention_job_cycles
from heteroreason.rtl.decoder.core import BUFFER_OUTPUT_LATENCY, PARAM_LAYOUT, TOKEN_START_LATENCY
from heteroreason.rtl.decoder.crossing import CROSSING_LATENCY
from heteroreason.rtl.decoder.crossing_shared import SHARED_LATENCY
from heteroreason.rtl.decoder.decode_schedule import entries_per_param_beat
from heteroreason.rtl.decoder.mvu import result_latency
from heteroreason.rtl.decoder.operators import Operator, Sink, Unit, token_operators
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.decoder.rmsnorm import DIVIDER_CYCLES as NORM_DIVIDER_CYCLES
from heteroreason.rtl.decoder.rmsnorm import EMIT_LATENCY as NORM_EMIT_LATENCY
from heteroreason.rtl.decoder.rmsnorm import SCALE_CYCLES as NORM_SCALE_CYCLES
from heteroreason.rtl.decoder.rmsnorm import square_latency
from heteroreason.rtl.decoder.rope import LATENCY as ROPE_LATENCY
from heteroreason.rtl.decoder.sampler import latency as sampler_latency
from heteroreason.rtl.decoder.sequencer import (
    EMBED_LATENCY,
    LEAVE_LATENCY,
    LOGIT_LATENCY,
    READ_LATENCY,
)
from heteroreason.rtl.decoder.swiglu import LATENCY as SWIGLU_LATENCY

__all__ = ["OVERHEADS", "CoreTiming", "Overheads", "cycles_to_ms"]


@dataclass(frozen=True)
class Overheads:
    """Fixed cycles per operator beyond its unit's element, row and beat counts. The defaults
    are a calibration's rounded values; the committed calibration file holds the fitted ones."""

    first_beat: float = 5.0  # from the token to its first weight beat, beyond the latency
    embed: float = 28.0
    norm: float = 2.0  # the state changes around the divider and the scaling
    vector_load: float = 0.0
    matvec: float = 0.0
    rope: float = 44.0
    kv_write: float = 17.5
    attention_job: float = 4.0  # a job's command and the hand-overs around its queries
    silu_table: float = 11.5
    tail: float = 0.0

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


OVERHEADS = Overheads()


@dataclass(frozen=True)
class CoreTiming:
    """Cycles of the decoder core for a model, a parameterization and the latency of the
    memory it reads from (cycles from a request to its first beat)."""

    config: Qwen2Config
    params: DecoderParams
    memory_latency_cycles: int = 0
    overheads: Overheads = OVERHEADS
    stream_beats_per_cycle: float = 1.0  # what the memory sustains (:mod:`.hbm`), in (0, 1]
    shared_ports: bool = False  # parameters and KV rows on the weights' ports (:mod:`.hbm`)

    def __post_init__(self):
        if not isinstance(self.params, DecoderParams):
            raise TypeError(f"params must be a DecoderParams, not {type(self.params).__name__}")
        self.params.check_model(self.config)
        latency = self.memory_latency_cycles
        checks.integer("memory_latency_cycles", latency, low=0)
        rate = self.stream_beats_per_cycle
        checks.number("stream_beats_per_cycle", rate, low=0, high=1, low_open=True)
        if not isinstance(self.shared_ports, bool):
            raise ValueError(f"shared_ports must be a bool, not {self.shared_ports!r}")

    def operators(self, position: int, *, keep_logits: bool = True) -> list[tuple]:
        """``(name, compute cycles, matrix-vector beats)`` of one token at ``position``, in the
        RTL's order (the operator table's); the compute cycles of a matrix-vector operator are
        its vector load."""
        c = self.config
        checks.integer("position", position, low=0, high=c.max_context - 1,
                       note="the model's context")
        return [(op.name, *self._cycles(op, position))
                for _, op in token_operators(c.layers, keep_logits=keep_logits)]

    def _cycles(self, op: Operator, position: int) -> tuple[float, int]:
        """(compute cycles, matrix-vector beats) of one operator."""
        c, p, o = self.config, self.params, self.overheads
        lanes, hd, v = p.lanes, c.head_dim, p.vector_width

        def beats(cols):
            return -(-cols // lanes)

        if op.unit is Unit.MATVEC:
            cols, rows = getattr(c, op.cols), getattr(c, op.rows)
            # the scratchpad's reader started, then a row a cycle and the beat handed over
            load = o.vector_load if op.reuse else \
                READ_LATENCY + beats(cols) * (lanes // v + 1) + o.vector_load
            return load, rows // p.rows_per_beat * beats(cols)
        if op.unit is Unit.EMBED:
            return c.hidden + self.embed_row_beats + EMBED_LATENCY + o.embed, 0
        if op.unit is Unit.NORM:
            # rows in, the last squares summed, the division, the reciprocal square root, the
            # elements issued ``param_width`` a cycle, the last ones through the output pipeline
            return (READ_LATENCY + c.hidden // v + square_latency(v) + 1 + NORM_DIVIDER_CYCLES
                    + NORM_SCALE_CYCLES + c.hidden // p.param_width + NORM_EMIT_LATENCY
                    + o.norm), 0
        if op.unit is Unit.ROPE:
            # each head in, then out; the last head's rotations leave the unit's pipeline
            return READ_LATENCY + 2 * getattr(c, op.heads) * hd // v + o.rope + ROPE_LATENCY, 0
        if op.unit is Unit.KV_WRITE:
            # per KV head: its K rows and its V rows, each run through the reader; the write
            return c.kv_heads * (2 * (1 + READ_LATENCY + hd // v) + 1) + o.kv_write, 0
        if op.unit is Unit.ATTENTION:
            jobs = c.heads // p.heads_parallel
            job = dict(head_dim=hd, heads=p.heads_parallel, width=v, length=position + 1,
                       kv_rows=p.kv_rows)
            # a job's command and its queries gathered and sent; its key rows' latency
            # (the command and the queries cross into the unit and the key rows' request out
            # of it, CROSSING_LATENCY each; the rows come in on the crossing they share with
            # the value rows, SHARED_LATENCY)
            query = READ_LATENCY + p.heads_parallel * (hd // v + 1) + o.attention_job + \
                CROSSING_LATENCY + \
                (self.memory_latency_cycles + CROSSING_LATENCY + SHARED_LATENCY
                 if p.external_kv else 0)
            # each later job's command, queries and scores while the job before it is in the
            # unit's second stage: it enters that stage when both are done
            scores = 1 + query + -(-(position + 1) // p.kv_rows) + \
                score_latency(hd, p.kv_rows) + HANDOFF_CYCLES
            # the last output crosses back out of the unit
            cycles = query + attention_job_cycles(**job) + \
                (jobs - 1) * max(back_cycles(**job), scores) + CROSSING_LATENCY
            return cycles, 0
        if op.unit is Unit.SILU_TABLE:
            return 256 + o.silu_table, 0
        raise AssertionError(f"no cycle formula for unit {op.unit}")  # pragma: no cover

    def borrowed_bytes(self, position: int, *, keep_logits: bool = True) -> list[int]:
        """The bytes each operator of a token at ``position`` moves on the memory's ports
        besides its weights (:meth:`operators`' order): its parameter beats' entries (the
        core's parameter layout, the entries a beat uses: a norm's gains ``param_width`` a
        beat, a matrix-vector operator's row parameters ``rows_per_beat`` a beat, the SiLU
        table an entry a beat, the embedding row's parameter; a time-shared image stores only
        those, the port's width converter fills the beat), the K and V rows the KV write
        stores, and with the KV cache in memory the rows each attention job reads (K and V,
        whole beats of ``kv_rows``)."""
        c, p = self.config, self.params
        checks.integer("position", position, low=0, high=c.max_context - 1,
                       note="the model's context")
        out = []
        entry_bits = PARAM_LAYOUT.size
        for _, op in token_operators(c.layers, keep_logits=keep_logits):
            per_beat = entries_per_param_beat(op.unit, p.param_width, p.rows_per_beat)
            beat = -(-per_beat * entry_bits // 8)
            if op.unit is Unit.MATVEC:
                moved = getattr(c, op.rows) // per_beat * beat
            elif op.unit is Unit.NORM:
                moved = c.hidden // per_beat * beat
            elif op.unit is Unit.SILU_TABLE:
                moved = 256 * beat
            elif op.unit is Unit.EMBED:
                moved = beat
            elif op.unit is Unit.KV_WRITE and p.external_kv:
                moved = 2 * c.kv_heads * c.head_dim
            elif op.unit is Unit.ATTENTION and p.external_kv:
                rows = -(-(position + 1) // p.kv_rows) * p.kv_rows
                moved = c.heads // p.heads_parallel * 2 * rows * c.head_dim
            else:
                moved = 0
            out.append(moved)
        return out

    @property
    def embed_row_beats(self) -> int:
        """Matrix-vector beats of an embedding row (the last zero-padded)."""
        return -(-self.config.hidden // self.params.beat_bytes)

    def weight_stream_beats(self, *, keep_logits: bool = True, batch: int = 1) -> int:
        """Stream beats of one pass: the weight bytes over the stream width (an embedding row
        a token of the ``batch``)."""
        p = self.params
        mv = _matvec_beats(self.config, p.lanes, p.rows_per_beat, keep_logits)
        return (mv + batch * self.embed_row_beats) * p.ratio

    def token_cycles(self, position: int, *, keep_logits: bool = True) -> float:
        """Cycles from taking a token at ``position`` to being done with it (its sample out)."""
        return self._pass_cycles((position,), keep_logits=keep_logits)

    def batch_cycles(self, position: int, batch: int) -> float:
        """Cycles of a batched ingest: the ``batch`` tokens (at most the design's
        ``ingest_batch``) at ``position``, ``position + 1``, ... through every layer on one
        pass of the weights, no LM head. Each matrix-vector operator loads the batch's vectors
        one after the other and streams its weights once; the embedding, norms, RoPE, KV
        writes and attention run token by token (each token's attention over its own length:
        causal within the batch); the SiLU table loads once a layer. ``batch_cycles(position,
        1)`` is ``token_cycles(position, keep_logits=False)``."""
        most = self.params.ingest_batch
        checks.integer("batch", batch, low=1, high=most, note="the design's ingest_batch")
        last = self.config.max_context - batch
        checks.integer("position", position, low=0, high=last,
                       note=f"the model's context less the batch of {batch}")
        return self._pass_cycles(tuple(range(position, position + batch)), keep_logits=False)

    def contexts_pass_cycles(self, positions: Sequence[int], *,
                             samples: int | None = None) -> float:
        """Cycles of one pass of the weights for tokens of several contexts (``DecoderParams(
        contexts=N)``, docs/design.md §4.7), each at its own position: each matrix-vector
        operator loads the tokens' vectors in turn and streams its weights once; each token's
        embedding, norms, RoPE, KV write and attention (over its own context, up to its own
        position) in turn; with ``samples`` kept tokens (all of them by default) the LM head
        once, a sampler each, the first sample after the sampler's latency and each further
        one a cycle later; with none, no LM head. At most the design's ``ingest_batch``
        tokens; one kept token is :meth:`token_cycles`."""
        positions = tuple(positions)
        most = self.params.ingest_batch
        checks.integer("contexts a pass", len(positions), low=1, high=most,
                       note="the design's ingest_batch")
        for k, position in enumerate(positions):
            checks.integer(f"position of context {k}", position, low=0,
                           high=self.config.max_context - 1, note="the model's context")
        samples = len(positions) if samples is None else samples
        checks.integer("samples", samples, low=0, high=len(positions),
                       note="the pass's tokens")
        if not samples:
            return self._pass_cycles(positions, keep_logits=False)
        return self._pass_cycles(positions, keep_logits=True) + samples - 1

    def _operator_cycles(self, positions: tuple[int, ...], *,
                         keep_logits: bool) -> list[tuple]:
        """:meth:`operators` for a pass of tokens at ``positions``: the compute cycles of every
        token's share of an operator, the matrix-vector beats once."""
        ops = self.operators(positions[0], keep_logits=keep_logits)
        if len(positions) == 1:
            return ops
        later = [self.operators(p, keep_logits=keep_logits) for p in positions[1:]]
        units = [op.unit for _, op in token_operators(self.config.layers,
                                                      keep_logits=keep_logits)]
        merged = []
        for index, ((name, compute, beats), unit) in enumerate(zip(ops, units, strict=True)):
            if unit is not Unit.SILU_TABLE:  # the table is the layer's, not a token's
                compute += sum(token[index][1] for token in later)
            merged.append((name, compute, beats))
        return merged

    def _pass_cycles(self, positions: tuple[int, ...], *, keep_logits: bool) -> float:
        """Cycles of one pass of the weights for tokens at ``positions``."""
        p, o = self.params, self.overheads
        r = p.ratio
        batch = len(positions)
        cap = p.weight_buffer * r  # stream beats the buffer holds
        borrowed = self._borrowed_beats(positions, keep_logits=keep_logits)
        units = [op.unit for _, op in token_operators(self.config.layers,
                                                      keep_logits=keep_logits)]
        # a matrix-vector operator's parameters come with its weights (stream beats of it)
        with_weights = [b if unit is Unit.MATVEC else 0.0
                        for b, unit in zip(borrowed, units, strict=True)]
        total = self.weight_stream_beats(keep_logits=keep_logits, batch=batch) + \
            sum(with_weights)
        # the first stream beat, through the gearbox and the buffer's output register
        first = self.memory_latency_cycles + r + BUFFER_OUTPUT_LATENCY + o.first_beat
        # the matrix-vector unit's pipeline: its last result leaves this long after the last
        # beat (the operator waits for it), one cycle of which the beat count already holds
        drain = result_latency(p.lanes, vectors=p.ingest_batch,
                               rows_per_beat=p.rows_per_beat) - 1
        t = float(TOKEN_START_LATENCY)  # the first operator starts a cycle after the token
        delivered = consumed = 0.0  # stream beats
        debt = 0.0  # stream beats of the ports' time the other streams take first

        rate = self.stream_beats_per_cycle

        def stream(until: float) -> None:
            nonlocal delivered, debt
            active = max(0.0, until - max(t, first))
            supply = rate * active
            paid = min(debt, supply)
            debt -= paid
            delivered = min(delivered + supply - paid, consumed + cap, total)

        sinks = [op.sink for _, op in token_operators(self.config.layers,
                                                      keep_logits=keep_logits)]
        for index, ((name, compute, mv_beats), sink) in enumerate(zip(
                self._operator_cycles(positions, keep_logits=keep_logits), sinks,
                strict=True)):
            if index:  # the operator before leaves a cycle after its last handshake
                stream(t + LEAVE_LATENCY)
                t += LEAVE_LATENCY
            debt += borrowed[index] - with_weights[index]
            if name == "embed":  # its rows are the stream's first data
                rows = batch * self.embed_row_beats * r
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
            need = mv_beats * r + with_weights[index]
            if t < first:  # nothing has arrived yet
                stream(first)
                t = first
            duration = max(float(mv_beats), (need + debt - (delivered - consumed)) / rate) + \
                o.matvec + drain
            if sink is Sink.SWIGLU:  # the operator ends with the SwiGLU unit's last result
                duration += SWIGLU_LATENCY
            consumed += need  # the buffer frees as it drains: the stream runs on meanwhile
            stream(t + duration)
            delivered = max(delivered, consumed)
            t += duration
        # a kept token's last logit reaches the sampler through a register; its sample (the
        # LM head's leave cycle within it). Without logits: the final norm's leave cycle
        sample = LOGIT_LATENCY + sampler_latency(p.rows_per_beat) if keep_logits \
            else LEAVE_LATENCY
        return t + sample + o.tail

    def _borrowed_beats(self, positions: tuple[int, ...], *,
                        keep_logits: bool) -> list[float]:
        """:meth:`borrowed_bytes` of a pass of tokens at ``positions`` in stream beats (the
        parameters once a pass, the KV rows each token's): zeros unless ``shared_ports``."""
        ops = len(token_operators(self.config.layers, keep_logits=keep_logits))
        if not self.shared_ports:
            return [0.0] * ops
        first = self.borrowed_bytes(positions[0], keep_logits=keep_logits)
        units = [op.unit for _, op in token_operators(self.config.layers,
                                                      keep_logits=keep_logits)]
        moved = list(first)
        for position in positions[1:]:
            later = self.borrowed_bytes(position, keep_logits=keep_logits)
            for index, unit in enumerate(units):
                if unit in (Unit.KV_WRITE, Unit.ATTENTION):
                    moved[index] += later[index]
        return [m / self.params.stream_bytes for m in moved]

    def with_overheads(self, overheads: Overheads) -> CoreTiming:
        return replace(self, overheads=overheads)


@functools.cache
def _matvec_beats(config, lanes: int, rows_per_beat: int, keep_logits: bool) -> int:
    """The matrix-vector beats of a token's operators (those of :meth:`CoreTiming._cycles`,
    without the compute): they depend on the shapes, the lanes and the rows a beat alone."""
    return sum(getattr(config, op.rows) // rows_per_beat * -(-getattr(config, op.cols) // lanes)
               for _, op in token_operators(config.layers, keep_logits=keep_logits)
               if op.unit is Unit.MATVEC)


def cycles_to_ms(cycles: float, clock_hz: float) -> float:
    if not clock_hz > 0:
        raise ValueError(f"clock_hz must be positive, not {clock_hz!r}")
    return 1000.0 * cycles / clock_hz
