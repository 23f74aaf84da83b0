"""Decoder core: one token through the whole draft model, operator by operator, on one set of
units (:mod:`~heteroreason.rtl.decoder.mvu`, ``rmsnorm``, ``rope``, ``attention``, ``swiglu``,
``sampler``) reused across layers, in the order of the operator table
(:data:`heteroreason.rtl.decoder.operators.OPERATORS`), with weights and parameters read from
memory in the order of :func:`heteroreason.rtl.decoder.decode_schedule.decode_schedule`."""

from types import SimpleNamespace

from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model.spec.numerics.qwen2_int8 import QuantizedModel
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.attention import Attention, kv_cache_rows, kv_memory_ports
from heteroreason.rtl.decoder.crossing import crossing_names, far_ends
from heteroreason.rtl.decoder.decode_schedule import decode_schedule
from heteroreason.rtl.decoder.mvu import MatVecUnit
from heteroreason.rtl.decoder.operators import (
    OPERATORS,
    lm_head_pc,
)
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.decoder.pass_sampler import PassSampler
from heteroreason.rtl.decoder.prefetch_fifo import PrefetchFIFO
from heteroreason.rtl.decoder.rmsnorm import RmsNorm
from heteroreason.rtl.decoder.rope import Rope
from heteroreason.rtl.decoder.sampler import ArgmaxSampler
from heteroreason.rtl.decoder.scratchpad import buffer_output
from heteroreason.rtl.decoder.sequencer import Port, Sequencer, Units
from heteroreason.rtl.decoder.swiglu import SwiGlu

__all__ = ["BUFFER_OUTPUT_LATENCY", "KV_PORTS", "PARAM_LAYOUT", "TOKEN_START_LATENCY",
           "DecoderCore", "param_beat_layout"]

BUFFER_OUTPUT_LATENCY = 2  # the prefetch buffers' landing and output registers: head -> operator
TOKEN_START_LATENCY = 1  # a token taken -> its first operator's first cycle

KV_PORTS = ("kv_store", "k_req", "v_req", "k_rows", "v_rows")
PARAM_LAYOUT = data.StructLayout({"value": signed(32), "mult": unsigned(31), "shift": unsigned(6)})


def param_beat_layout(param_width: int):
    """A parameter beat: one :data:`PARAM_LAYOUT` entry, or an array of ``param_width``."""
    return PARAM_LAYOUT if param_width == 1 else data.ArrayLayout(PARAM_LAYOUT, param_width)


class DecoderCore(wiring.Component):
    """The integer reference's decode step (:class:`heteroreason.model.spec.numerics.qwen2_int8.
    IntDecoder`) in hardware, one token at a time.

    A beat on ``token`` (id, KV position, whether its logits are kept) runs the token through
    every layer — its KV entries are written at ``pos`` — and, when its logits are kept, the LM
    head and the sampler, whose result leaves on ``sample``. The model's scalar constants
    (RMSNorm epsilon, attention and SwiGLU multipliers, RoPE increments) are fixed at
    elaboration; the weights are data.

    Weights and parameters are prefetched: as the token is taken, the core requests everything
    it will read, in :meth:`~heteroreason.rtl.decoder.decode_schedule.DecodeSchedule.
    fetch_plan` order (three requests on each of ``wreq`` and ``preq``), and the beats queue in
    on-chip buffers (``weight_buffer`` beats of ``lanes * rows_per_beat`` bytes,
    ``param_buffer`` parameter beats) while the operators that need no weights (norms, RoPE,
    attention, the KV write) run. The weight stream is ``stream_bytes`` wide; a gearbox packs
    ``lanes * rows_per_beat // stream_bytes`` stream beats into one matrix-vector beat, so with
    a beat wider than the stream the
    matrix-vector unit drains the buffer faster than memory fills it and the stream never waits
    on compute once the buffer covers the longest stretch without a matrix-vector product. Both
    buffers are read through a landing register and three output registers taken in turn
    (:data:`BUFFER_OUTPUT_LATENCY`): nothing but a register waits behind a block RAM's
    clock-to-output in the cycle it reads, and the consumer's ready reaches no read enable.

    Activations live in one on-chip scratchpad of ``vector_width`` 16-bit elements a row,
    read synchronously through read-ahead row readers and written through a register
    (:class:`~heteroreason.rtl.decoder.sequencer.Scratchpad`); operators run one after the
    other. The vector loads of the matrix-vector unit, the
    RMSNorm's input, RoPE, the KV write's gather, the attention's query gather and its outputs
    move ``vector_width`` elements a cycle; the RMSNorm's outputs ``param_width`` a cycle (each
    needs its own gain, and a parameter beat holds ``param_width``); the matrix-vector results
    ``rows_per_beat`` a cycle (into a span of a scratchpad row, added to the residual's span,
    through SwiGLU's lanes, or into the sampler's comparison tree); the embedding one a cycle.
    The matrix-vector unit runs at ``lanes * rows_per_beat`` MACs per cycle, ``rows_per_beat``
    rows side by side (reusing its vector buffer for k/v after q and up after gate; SwiGLU is
    applied to the up projection's outputs as they leave), the attention unit on
    ``heads_parallel`` query heads of one KV group at a time.

    Parameters
    ----------
    model : QuantizedModel
        The quantized model whose constants and shapes the core is built for.
    params : DecoderParams
        How the core is built (:class:`~heteroreason.rtl.decoder.params.DecoderParams`:
        lanes, rows a beat, stream width, buffers, heads in parallel, vector and parameter
        widths, external KV, the sampler's delimiters and EOS id); checked against the model.

    With ``ingest_batch`` B > 1 a ``token`` beat carries a batch: ``count`` (1 to B; other
    values are not allowed) host tokens in ``tokens`` at ``pos``, ``pos + 1``, ... They run
    through every layer on one pass of the weights: each matrix-vector operator loads every
    token's vector and meets each weight beat with all of them
    (:class:`~heteroreason.rtl.decoder.mvu.MatVecUnit` of B vectors); the embedding, the norms,
    RoPE, the KV writes and the attention run token by token, each token on its own bank of the
    scratchpad, its attention over its own length (causal within the batch); a norm's gains come
    from the parameter stream for the first token and from an on-chip copy for the others. With
    ``keep`` the batch's last token's logits are sampled.

    Members
    -------
    token : In(stream.Signature(StructLayout token, pos, keep))
        With ``ingest_batch`` > 1: ``StructLayout tokens, count, pos, keep``.
    sample : Out(stream.Signature(StructLayout token, step_end, eos))
    wreq, preq : Out(stream.Signature(StructLayout addr, count))
        Requests in stream beats (``wreq``) and parameter beats (``preq``).
    wdata : In(stream.Signature(ArrayLayout(signed(8), stream_bytes)))
    pdata : In(stream.Signature(param_beat_layout(param_width)))
        Parameter beats: ``param_width`` entries of (value signed(32), mult, shift).
    busy : Out(1)
    weight_wait : Out(1)
        An operator wants a weight beat and the buffer is empty (memory-bound cycle).
    buffer_full : Out(1)
        A weight beat is offered and the buffer has no room (compute-bound cycle).
    kv_store, k_req, v_req, k_rows, v_rows
        Only with ``external_kv``: the attention unit's KV memory ports.

    Latency
    -------
    A token takes the cycles of :meth:`heteroreason.model.timing.fpga.core_cycles.CoreTiming.
    token_cycles` (calibrated against this RTL within 2 %), its first operator starting
    :data:`TOKEN_START_LATENCY` cycle after the token is taken (the handshake reaches only the
    token's registers; the sequencer starts from them).
    """

    def __init__(self, *, model: QuantizedModel, params: DecoderParams):
        if not isinstance(model, QuantizedModel):
            raise TypeError(f"model must be a QuantizedModel, not {type(model).__name__}")
        if not isinstance(params, DecoderParams):
            raise TypeError(f"params must be a DecoderParams, not {type(params).__name__}")
        c = model.config
        params.check_model(c)
        self._model = model
        self._params = params
        self._schedule = decode_schedule(model, lanes=params.lanes,
                                         param_width=params.param_width,
                                         rows_per_beat=params.rows_per_beat)
        self._config = c
        ratio = params.ratio
        w_beats = len(self._schedule.weight_image) * ratio
        p_beats = len(self._schedule.param_image)
        largest = max(max(r.count * (ratio if r.kind == "weights" else 1)
                          for r in plan) for plan in self._schedule.fetch_plan(0, keep_logits=True))
        request = data.StructLayout({"addr": range(max(w_beats, p_beats)),
                                     "count": range(largest + 1)})
        kv_ports = kv_memory_ports(
            head_dim=c.head_dim, rows=kv_cache_rows(layers=len(model.layers),
                                                    kv_heads=c.kv_heads,
                                                    max_context=c.max_context,
                                                    contexts=params.contexts),
            max_context=c.max_context, kv_rows=params.kv_rows) if params.external_kv else {}
        n = params.ingest_batch
        token = {"token": range(c.vocab), "pos": range(c.max_context), "keep": 1}
        sample = {"token": range(c.vocab), "step_end": 1, "eos": 1}
        if params.contexts > 1:  # a pass: each token its context, position and keep
            token = {"tokens": data.ArrayLayout(range(c.vocab), n), "count": range(1, n + 1),
                     "ctx": data.ArrayLayout(range(params.contexts), n),
                     "pos": data.ArrayLayout(range(c.max_context), n), "keep": n}
            sample["ctx"] = range(params.contexts)
        elif n > 1:  # a batch: its tokens at pos, pos + 1, ...
            token = {"tokens": data.ArrayLayout(range(c.vocab), n), "count": range(1, n + 1),
                     "pos": range(c.max_context), "keep": 1}
        super().__init__(kv_ports | {
            "token": In(stream.Signature(data.StructLayout(token))),
            "sample": Out(stream.Signature(data.StructLayout(sample))),
            "wreq": Out(stream.Signature(request)),
            "preq": Out(stream.Signature(request)),
            "wdata": In(stream.Signature(data.ArrayLayout(signed(8), params.stream_bytes))),
            "pdata": In(stream.Signature(param_beat_layout(params.param_width))),
            "busy": Out(1),
            "weight_wait": Out(1),
            "buffer_full": Out(1),
        })

    @property
    def model(self):
        return self._model

    @property
    def params(self) -> DecoderParams:
        return self._params

    @property
    def schedule(self):
        return self._schedule

    @property
    def lanes(self):
        return self._params.lanes

    @property
    def stream_bytes(self):
        return self._params.stream_bytes

    @property
    def heads_parallel(self):
        return self._params.heads_parallel

    @property
    def vector_width(self):
        return self._params.vector_width

    @property
    def external_kv(self):
        return self._params.external_kv

    def _attention(self) -> Attention:
        c = self._config
        return Attention(head_dim=c.head_dim, kv_heads=c.kv_heads,
                         layers=len(self._model.layers),
                         max_context=c.max_context, heads=self._params.heads_parallel,
                         external_kv=self._params.external_kv, width=self._params.vector_width,
                         kv_rows=self._params.kv_rows, contexts=self._params.contexts,
                         crossings=True)

    def _sampler(self):
        c, p = self._config, self._params
        if p.contexts == 1:
            return ArgmaxSampler(vocab=c.vocab, delimiters=p.delimiters, eos=p.eos,
                                 width=p.rows_per_beat)
        return PassSampler(vocab=c.vocab, delimiters=p.delimiters, eos=p.eos,
                           width=p.rows_per_beat, tokens=p.ingest_batch, contexts=p.contexts)

    def elaborate(self, platform):
        m = Module()
        c, p = self._config, self._params
        k = p.rows_per_beat
        units = Units(
            mvu=MatVecUnit(lanes=p.lanes, max_beats=-(-max(c.hidden, c.ffn, c.q_dim) // p.lanes),
                           max_rows=max(c.vocab, c.ffn, c.hidden, c.q_dim) // k,
                           rows_per_beat=k, vectors=p.ingest_batch),
            norm=RmsNorm(max_length=c.hidden, width=p.vector_width, gains=p.param_width),
            rope=Rope(head_dim=c.head_dim, increments=self._model.rope_inc,
                      max_position=c.max_context - 1, width=p.vector_width),
            att=self._attention(), swiglu=SwiGlu(width=k * p.ingest_batch),
            sampler=self._sampler())
        for name, unit in vars(units).items():
            m.submodules[name] = unit
        wiring.connect(m, units.sampler.token, wiring.flipped(self.sample))
        # the attention's streams cross into it and out of it registered on both sides (a
        # floorplan places it in another SLR): their other halves here, in the glue
        ends = far_ends(m, units.att, crossing_names(units.att),
                        prefix="xing_att")  # (the fit counts ``xing_`` children as glue)
        ends = units.att.far_side(m, ends)  # an external cache's rows kept beside it
        if p.external_kv:
            for name in KV_PORTS:
                if self.signature.members[name].flow is wiring.In:
                    wiring.connect(m, wiring.flipped(getattr(self, name)), ends[name])
                else:
                    wiring.connect(m, ends[name], wiring.flipped(getattr(self, name)))
        units.att = SimpleNamespace(**ends)  # what the sequencer drives and reads

        token = Signal(self.token.payload.shape())
        running = Signal()
        m.d.comb += [self.busy.eq(running), self.token.ready.eq(~running)]
        start_token = self.token.valid & ~running
        self._prefetch(m, token, running, start_token)
        weights = self._weight_path(m, running)
        params = self._param_path(m)
        seq = Sequencer(m, self._model, self._params, units, token, weights, params)
        if p.contexts > 1:  # which tokens' samples leave, and their contexts
            m.d.comb += [units.sampler.keep.eq(token.keep), units.sampler.ctx.eq(token.ctx)]
        # the sequencer starts the cycle after a token is taken (TOKEN_START_LATENCY): the
        # handshake's valid, which comes a long way, reaches only the token's registers
        taken = Signal()
        m.d.sync += taken.eq(start_token)
        with m.If(start_token):
            m.d.sync += [token.eq(self.token.payload), running.eq(1)]
        with m.If(taken):
            seq.reset()

        lm_head = lm_head_pc()
        with m.If(running & ~taken & ~seq.leaving), m.Switch(seq.pc):
            for pc, op in enumerate(OPERATORS):
                with m.Case(pc):
                    if pc == lm_head:
                        with m.If(~seq.keep_any):
                            m.d.sync += running.eq(0)
                        with m.Else():
                            seq.run(op)
                    else:
                        seq.run(op)
            with m.Default():
                m.d.sync += running.eq(0)
        seq.leave()
        seq.matvec_streams()
        seq.feeds()
        seq.gathers()
        seq.writes()
        return m

    def _prefetch(self, m, token, running, start_token) -> None:
        """Three requests per stream, issued as soon as the token is known."""
        if self._params.ingest_batch > 1:
            self._batch_prefetch(m, token, running, start_token)
            return
        sched, ratio = self._schedule, self._params.ratio
        w_plan, p_plan = sched.fetch_plan(0, keep_logits=True)
        embed_row, embed_param = sched.regions["embed"], sched.regions["embed_params"]
        for req, plan, scale, first in (
                (self.wreq, w_plan, ratio,
                 (embed_row.start + token.token * sched.embed_row_beats) * ratio),
                (self.preq, p_plan, 1, embed_param.start + token.token)):
            sent = Signal(range(4))
            with m.If(start_token):
                m.d.sync += sent.eq(0)
            m.d.comb += req.valid.eq(running & ((sent < 2) | ((sent < 3) & token.keep)))
            with m.Switch(sent):
                with m.Case(0):
                    m.d.comb += [req.payload.addr.eq(first),
                                 req.payload.count.eq(plan[0].count * scale)]
                for k in (1, 2):
                    with m.Case(k):
                        m.d.comb += [req.payload.addr.eq(plan[k].start * scale),
                                     req.payload.count.eq(plan[k].count * scale)]
            with m.If(req.valid & req.ready):
                m.d.sync += sent.eq(sent + 1)

    def _batch_prefetch(self, m, token, running, start_token) -> None:
        """A batch's requests per stream: each token's embedding entry, then the layers, then
        the LM head when the logits are kept."""
        sched, ratio = self._schedule, self._params.ratio
        w_plan, p_plan = sched.fetch_plan(0, keep_logits=True)
        embed_row, embed_param = sched.regions["embed"], sched.regions["embed_params"]
        n = self._params.ingest_batch
        for req, plan, scale in ((self.wreq, w_plan, ratio), (self.preq, p_plan, 1)):
            embeds = Signal(range(n + 1), name=f"{(req is self.wreq and 'w') or 'p'}_embeds")
            rest = Signal(range(3), name=f"{(req is self.wreq and 'w') or 'p'}_rest")
            with m.If(start_token):
                m.d.sync += [embeds.eq(0), rest.eq(0)]
            embedding = embeds < token.count
            keep = token.keep if self._params.contexts == 1 else token.keep.any()
            m.d.comb += req.valid.eq(running & (embedding | (rest == 0) | ((rest == 1) & keep)))
            tok = token.tokens[embeds[:max(1, (n - 1).bit_length())]]
            with m.If(embedding):
                if req is self.wreq:
                    m.d.comb += [req.payload.addr.eq((embed_row.start + tok
                                                      * sched.embed_row_beats) * ratio),
                                 req.payload.count.eq(plan[0].count * scale)]
                else:
                    m.d.comb += [req.payload.addr.eq(embed_param.start + tok),
                                 req.payload.count.eq(plan[0].count)]
                with m.If(req.ready):
                    m.d.sync += embeds.eq(embeds + 1)
            with m.Else():
                with m.Switch(rest):
                    for k in (0, 1):
                        with m.Case(k):
                            m.d.comb += [req.payload.addr.eq(plan[k + 1].start * scale),
                                         req.payload.count.eq(plan[k + 1].count * scale)]
                with m.If(req.valid & req.ready):
                    m.d.sync += rest.eq(rest + 1)

    def _weight_path(self, m, running) -> Port:
        """Stream beats -> gearbox -> prefetch buffer -> the operators."""
        p = self._params
        lanes, ratio = p.beat_bytes, p.ratio
        # a write enable a column of its memories (a byte's pin each: one net would reach
        # 1,792 of them at the U280's 14,336-bit beat)
        m.submodules.wbuf = wbuf = PrefetchFIFO(width=lanes * 8, depth=p.weight_buffer)
        if ratio == 1:
            m.d.comb += [wbuf.w_data.eq(self.wdata.payload), wbuf.w_en.eq(self.wdata.valid),
                         self.wdata.ready.eq(wbuf.w_rdy)]
        else:
            packed = Signal(lanes * 8, reset_less=True)  # ``full`` says when it holds a beat
            part = Signal(range(ratio))
            full = Signal()
            m.d.comb += [wbuf.w_data.eq(packed), wbuf.w_en.eq(full),
                         self.wdata.ready.eq(~full | wbuf.w_rdy)]
            with m.If(full & wbuf.w_rdy):
                m.d.sync += full.eq(0)
            with m.If(self.wdata.valid & self.wdata.ready):
                m.d.sync += [packed.word_select(part, p.stream_bytes * 8).eq(self.wdata.payload),
                             part.eq(part + 1)]
                with m.If(equals(part, ratio - 1)):
                    m.d.sync += [part.eq(0), full.eq(1)]
        port = buffer_output(m, wbuf, data.ArrayLayout(signed(8), lanes), "wbuf_out")
        m.d.comb += [self.weight_wait.eq(running & port.ready & ~port.valid),
                     self.buffer_full.eq(self.wdata.valid & ~self.wdata.ready)]
        return port

    def _param_path(self, m) -> Port:
        layout = param_beat_layout(self._params.param_width)
        m.submodules.pbuf = pbuf = fifo.SyncFIFOBuffered(width=layout.size,
                                                        depth=self._params.param_buffer)
        m.d.comb += [pbuf.w_data.eq(self.pdata.payload), pbuf.w_en.eq(self.pdata.valid),
                     self.pdata.ready.eq(pbuf.w_rdy)]
        return buffer_output(m, pbuf, layout, "pbuf_out")

