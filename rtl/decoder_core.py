"""Decoder core: one token through the whole draft model, operator by operator, on one set of
units (:mod:`heteroreason.rtl.mvu`, ``rmsnorm``, ``rope``, ``attention``, ``swiglu``,
``sampler``) reused across layers, with weights and parameters read from memory in the order of
:func:`heteroreason.model.decode_schedule.decode_schedule`."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model.decode_schedule import decode_schedule
from heteroreason.model.qwen2_int8 import QuantizedModel
from heteroreason.rtl.arith import requantize, saturate
from heteroreason.rtl.attention import Attention, kv_memory_ports
from heteroreason.rtl.compare import equals
from heteroreason.rtl.mvu import MatVecUnit, OutBits
from heteroreason.rtl.rmsnorm import RmsNorm
from heteroreason.rtl.rope import Rope
from heteroreason.rtl.sampler import ArgmaxSampler
from heteroreason.rtl.swiglu import SwiGlu

__all__ = ["PARAM_LAYOUT", "DecoderCore"]

KV_PORTS = ("kv_store", "k_req", "v_req", "k_rows", "v_rows")
FIRST_LAYER_OP, LAST_LAYER_OP = 1, 14  # the operator sequence: see DecoderCore.elaborate
PARAM_LAYOUT = data.StructLayout({"value": signed(32), "mult": unsigned(31), "shift": unsigned(6)})


class DecoderCore(wiring.Component):
    """The integer reference's decode step (:class:`heteroreason.model.qwen2_int8.IntDecoder`)
    in hardware, one token at a time.

    A beat on ``token`` (id, KV position, whether its logits are kept) runs the token through
    every layer — its KV entries are written at ``pos`` — and, when its logits are kept, the LM
    head and the sampler, whose result leaves on ``sample``. The model's scalar constants
    (RMSNorm epsilon, attention and SwiGLU multipliers, RoPE increments) are fixed at
    elaboration; the weights are data.

    Weights and parameters are prefetched: as the token is taken, the core requests everything
    it will read, in :meth:`~heteroreason.model.decode_schedule.DecodeSchedule.fetch_plan` order
    (three requests on each of ``wreq`` and ``preq``), and the beats queue in on-chip buffers
    (``weight_buffer`` beats of ``lanes`` bytes, ``param_buffer`` parameter beats) while the
    operators that need no weights (norms, RoPE, attention, the KV write) run. The weight stream
    is ``stream_bytes`` wide; a gearbox packs ``lanes // stream_bytes`` stream beats into one
    matrix-vector beat, so with ``lanes > stream_bytes`` the matrix-vector unit drains the buffer
    faster than memory fills it and the stream never waits on compute once the buffer covers
    the longest stretch without a matrix-vector product.

    Activations live in one on-chip scratchpad of ``vector_width`` 16-bit elements a row;
    operators run one after the other. The vector loads of the matrix-vector unit, the
    RMSNorm's input, RoPE, the KV write's gather, the attention's query gather and its outputs
    move ``vector_width`` elements a cycle; the embedding, the RMSNorm's outputs (each needs its
    own gain) and the matrix-vector results move one a cycle. The matrix-vector unit runs at
    ``lanes`` MACs per cycle (reusing its vector buffer for k/v after q and up after gate;
    SwiGLU is applied to the up projection's outputs as they leave), the attention unit on
    ``heads_parallel`` query heads of one KV group at a time.

    Parameters
    ----------
    model : QuantizedModel
        The quantized model whose constants and shapes the core is built for.
    lanes : int
        MACs per cycle (weights per matrix-vector beat); must divide the hidden size.
    stream_bytes : int
        Weight-stream bytes per cycle; must divide ``lanes``. Defaults to ``lanes``.
    weight_buffer, param_buffer : int
        Depths of the prefetch buffers (matrix-vector beats, parameter beats).
    heads_parallel : int
        Query heads per attention job; must divide the heads per KV head.
    vector_width : int
        Scratchpad elements per row and per cycle of the vector paths: a power of two that
        divides ``lanes``, the FFN size and half the head size.
    external_kv : bool
        Keep the KV cache in memory behind the ``kv_store``/``k_req``/``k_rows``/``v_req``/
        ``v_rows`` ports (see :class:`~heteroreason.rtl.attention.Attention`) instead of on chip.
    delimiters, eos
        Step-delimiter and end-of-sequence ids for the sampler's marks.

    Members
    -------
    token : In(stream.Signature(StructLayout token, pos, keep))
    sample : Out(stream.Signature(StructLayout token, step_end, eos))
    wreq, preq : Out(stream.Signature(StructLayout addr, count))
        Requests in stream beats (``wreq``) and parameter beats (``preq``).
    wdata : In(stream.Signature(ArrayLayout(signed(8), stream_bytes)))
    pdata : In(stream.Signature(StructLayout value signed(32), mult, shift))
    busy : Out(1)
    weight_wait : Out(1)
        An operator wants a weight beat and the buffer is empty (memory-bound cycle).
    buffer_full : Out(1)
        A weight beat is offered and the buffer has no room (compute-bound cycle).
    kv_store, k_req, v_req, k_rows, v_rows
        Only with ``external_kv``: the attention unit's KV memory ports.
    """

    def __init__(self, *, model: QuantizedModel, lanes: int, stream_bytes: int | None = None,
                 weight_buffer: int = 1024, param_buffer: int = 256, heads_parallel: int = 1,
                 vector_width: int = 1, external_kv: bool = False, delimiters=(), eos=0):
        if not isinstance(model, QuantizedModel):
            raise TypeError(f"model must be a QuantizedModel, not {type(model).__name__}")
        self._model = model
        self._schedule = decode_schedule(model, lanes=lanes)  # validates lanes
        stream_bytes = lanes if stream_bytes is None else stream_bytes
        if isinstance(stream_bytes, bool) or not isinstance(stream_bytes, int) or \
                stream_bytes <= 0 or lanes % stream_bytes:
            raise ValueError(f"stream_bytes must be a positive divisor of lanes ({lanes}), "
                             f"not {stream_bytes!r}")
        for name, value in (("weight_buffer", weight_buffer), ("param_buffer", param_buffer),
                            ("heads_parallel", heads_parallel), ("vector_width", vector_width)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        c = model.config
        if vector_width & (vector_width - 1) or lanes % vector_width or c.ffn % vector_width \
                or (c.head_dim // 2) % vector_width:
            raise ValueError(f"vector_width must be a power of two that divides lanes ({lanes}), "
                             f"the FFN size ({c.ffn}) and half the head size "
                             f"({c.head_dim // 2}), not {vector_width!r}")
        if external_kv not in (False, True):  # 0 and 1 too
            raise ValueError(f"external_kv must be a bool, not {external_kv!r}")
        group = c.heads // c.kv_heads
        if group % heads_parallel:
            raise ValueError(f"heads_parallel ({heads_parallel}) must divide the query heads per "
                             f"KV head ({group})")
        self._lanes = lanes
        self._stream_bytes = stream_bytes
        self._weight_buffer = weight_buffer
        self._param_buffer = param_buffer
        self._heads_parallel = heads_parallel
        self._vector_width = vector_width
        self._external_kv = bool(external_kv)
        self._delimiters = tuple(delimiters)
        self._eos = eos
        self._config = c
        ratio = lanes // stream_bytes
        w_beats = len(self._schedule.weight_image) * ratio
        p_beats = len(self._schedule.param_image)
        largest = max(max(r.count * (ratio if r.kind == "weights" else 1)
                          for r in plan) for plan in self._schedule.fetch_plan(0, keep_logits=True))
        request = data.StructLayout({"addr": range(max(w_beats, p_beats)),
                                     "count": range(largest + 1)})
        kv_ports = kv_memory_ports(
            head_dim=c.head_dim, rows=len(model.layers) * c.kv_heads * c.max_context,
            max_context=c.max_context) if external_kv else {}
        super().__init__(kv_ports | {
            "token": In(stream.Signature(data.StructLayout({
                "token": range(c.vocab), "pos": range(c.max_context), "keep": 1}))),
            "sample": Out(stream.Signature(data.StructLayout({
                "token": range(c.vocab), "step_end": 1, "eos": 1}))),
            "wreq": Out(stream.Signature(request)),
            "preq": Out(stream.Signature(request)),
            "wdata": In(stream.Signature(data.ArrayLayout(signed(8), stream_bytes))),
            "pdata": In(stream.Signature(PARAM_LAYOUT)),
            "busy": Out(1),
            "weight_wait": Out(1),
            "buffer_full": Out(1),
        })

    @property
    def model(self):
        return self._model

    @property
    def schedule(self):
        return self._schedule

    @property
    def lanes(self):
        return self._lanes

    @property
    def stream_bytes(self):
        return self._stream_bytes

    @property
    def heads_parallel(self):
        return self._heads_parallel

    @property
    def vector_width(self):
        return self._vector_width

    @property
    def external_kv(self):
        return self._external_kv

    def _attention(self) -> Attention:
        c = self._config
        return Attention(head_dim=c.head_dim, kv_heads=c.kv_heads,
                         layers=len(self._model.layers),
                         max_context=c.max_context, heads=self._heads_parallel,
                         external_kv=self._external_kv, width=self._vector_width)

    def elaborate(self, platform):
        m = Module()
        c, q_model, sched, lanes = self._config, self._model, self._schedule, self._lanes
        regions = sched.regions
        group = c.heads // c.kv_heads
        hd = c.head_dim
        hp = self._heads_parallel
        ratio = lanes // self._stream_bytes
        vw = self._vector_width
        vshift = vw.bit_length() - 1

        mvu = MatVecUnit(lanes=lanes, max_beats=-(-max(c.hidden, c.ffn, c.q_dim) // lanes),
                         max_rows=max(c.vocab, c.ffn, c.hidden, c.q_dim))
        norm = RmsNorm(max_length=c.hidden, width=vw)
        rope = Rope(head_dim=hd, increments=q_model.rope_inc, max_position=c.max_context - 1,
                    width=vw)
        att = self._attention()
        swiglu = SwiGlu()
        sampler = ArgmaxSampler(vocab=c.vocab, delimiters=self._delimiters, eos=self._eos)
        m.submodules.mvu, m.submodules.norm, m.submodules.rope = mvu, norm, rope
        m.submodules.att, m.submodules.swiglu, m.submodules.sampler = att, swiglu, sampler
        wiring.connect(m, sampler.token, wiring.flipped(self.sample))
        if self._external_kv:
            wiring.connect(m, att.kv_store, wiring.flipped(self.kv_store))
            wiring.connect(m, att.k_req, wiring.flipped(self.k_req))
            wiring.connect(m, att.v_req, wiring.flipped(self.v_req))
            wiring.connect(m, wiring.flipped(self.k_rows), att.k_rows)
            wiring.connect(m, wiring.flipped(self.v_rows), att.v_rows)

        token = Signal(self.token.payload.shape())
        running = Signal()
        m.d.comb += [self.busy.eq(running), self.token.ready.eq(~running)]
        start_token = self.token.valid & ~running

        # prefetch: three requests per stream, issued as soon as the token is known
        w_plan, p_plan = sched.fetch_plan(0, keep_logits=True)
        embed_row, embed_param = regions["embed"], regions["embed_params"]
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

        # weight path: stream beats -> gearbox -> buffer -> operators
        beat_layout = data.ArrayLayout(signed(8), lanes)
        m.submodules.wbuf = wbuf = fifo.SyncFIFOBuffered(width=lanes * 8,
                                                        depth=self._weight_buffer)
        if ratio == 1:
            m.d.comb += [wbuf.w_data.eq(self.wdata.payload), wbuf.w_en.eq(self.wdata.valid),
                         self.wdata.ready.eq(wbuf.w_rdy)]
        else:
            packed = Signal(lanes * 8)
            part = Signal(range(ratio))
            full = Signal()
            m.d.comb += [wbuf.w_data.eq(packed), wbuf.w_en.eq(full),
                         self.wdata.ready.eq(~full | wbuf.w_rdy)]
            with m.If(full & wbuf.w_rdy):
                m.d.sync += full.eq(0)
            with m.If(self.wdata.valid & self.wdata.ready):
                m.d.sync += [packed.word_select(part, self._stream_bytes * 8).eq(
                                 self.wdata.payload),
                             part.eq(part + 1)]
                with m.If(equals(part, ratio - 1)):
                    m.d.sync += [part.eq(0), full.eq(1)]
        w_valid, w_ready = wbuf.r_rdy, Signal()
        w_beat = Signal(beat_layout)
        m.d.comb += [w_beat.eq(wbuf.r_data), wbuf.r_en.eq(w_ready),
                     self.weight_wait.eq(running & w_ready & ~w_valid),
                     self.buffer_full.eq(self.wdata.valid & ~self.wdata.ready)]

        m.submodules.pbuf = pbuf = fifo.SyncFIFOBuffered(width=PARAM_LAYOUT.size,
                                                        depth=self._param_buffer)
        m.d.comb += [pbuf.w_data.eq(self.pdata.payload), pbuf.w_en.eq(self.pdata.valid),
                     self.pdata.ready.eq(pbuf.w_rdy)]
        p_valid, p_ready = pbuf.r_rdy, Signal()
        param = Signal(PARAM_LAYOUT)
        m.d.comb += [param.eq(pbuf.r_data), pbuf.r_en.eq(p_ready)]

        # scratchpad: regions of 16-bit elements, ``vw`` a row (every region size is a
        # multiple of ``vw``, so every region starts a row)
        layout, at = {}, 0
        for name, size in (("r", c.hidden), ("h", c.hidden), ("q", c.q_dim), ("k", c.kv_dim),
                           ("v", c.kv_dim), ("a", c.q_dim), ("g", c.ffn), ("x", c.ffn)):
            layout[name] = at
            at += size
        rows_of = {name: start >> vshift for name, start in layout.items()}
        scratch_row = data.ArrayLayout(signed(16), vw)
        m.submodules.scratch = scratch = memory.Memory(shape=scratch_row, depth=at // vw,
                                                       init=[])
        rd0 = scratch.read_port(domain="comb")
        rd1 = scratch.read_port(domain="comb")
        wr = scratch.write_port(granularity=1)

        def load_element(port, addr):
            """Element ``addr`` of the scratchpad, read through ``port``."""
            element = Signal(signed(16))
            m.d.comb += port.addr.eq(addr >> vshift)
            if vshift:
                m.d.comb += element.eq(
                    port.data.as_value().word_select(addr[:vshift], 16).as_signed())
            else:
                m.d.comb += element.eq(port.data[0])
            return element

        def store_element(addr, value, enable):
            m.d.comb += wr.addr.eq(addr >> vshift)
            m.d.comb += [wr.data[k].eq(value) for k in range(vw)]
            lane_bit = Const(1, vw) << addr[:vshift] if vshift else Const(1, 1)
            with m.If(enable):
                m.d.comb += wr.en.eq(lane_bit)

        def store_row(row, values, enable):
            """Write ``vw`` int8 ``values`` (an array) at scratchpad row ``row``."""
            m.d.comb += [wr.addr.eq(row)] + [wr.data[k].eq(values[k]) for k in range(vw)]
            with m.If(enable):
                m.d.comb += wr.en.eq(Const((1 << vw) - 1, vw))

        def low_bytes(port):
            """The int8 elements of the row on ``port``, packed."""
            return Cat(*(port.data[k][:8] for k in range(vw)))

        n_layers = len(q_model.layers)
        # the operators: the embedding, the 14 of a layer (run once per layer, ``layer``
        # counting), the final norm and the LM head; per-layer constants come from tables
        n_ops = 1 + 14 + 2
        pc = Signal(range(n_ops + 1))
        layer = Signal(range(n_layers))

        def per_layer(values, shape):
            """The current layer's entry of a constant table."""
            out = Signal(shape)
            with m.Switch(layer):
                for k, v in enumerate(values):
                    with m.Case(k):
                        m.d.comb += out.eq(int(v))
            return out

        exp_mult = per_layer([ql.exp_req[0] for ql in q_model.layers], unsigned(31))
        exp_shift = per_layer([ql.exp_req[1] for ql in q_model.layers], unsigned(6))
        out_mult = per_layer([ql.attn_req[0] for ql in q_model.layers], unsigned(31))
        out_shift = per_layer([ql.attn_req[1] for ql in q_model.layers], unsigned(6))
        act_mult = per_layer([ql.act_req[0] for ql in q_model.layers], unsigned(31))
        act_shift = per_layer([ql.act_req[1] for ql in q_model.layers], unsigned(6))
        phase = Signal(range(8))
        i = Signal(range(max(c.vocab, c.ffn, 256) + 1))
        j = Signal(range(max(c.vocab, c.ffn, 256) + 1))
        lane = Signal(range(lanes + 1))
        head = Signal(range(max(c.heads, 1) + 1))
        beat = Signal(beat_layout)
        row = Signal(data.ArrayLayout(signed(8), hd))
        krow = Signal(data.ArrayLayout(signed(8), hd))
        have = Signal()
        p_mult, p_shift = Signal(unsigned(31)), Signal(unsigned(6))

        with m.If(start_token):
            m.d.sync += [token.eq(self.token.payload), running.eq(1), pc.eq(0), phase.eq(0),
                         i.eq(0), j.eq(0), lane.eq(0), head.eq(0), have.eq(0), layer.eq(0)]

        current = {"op": 0}  # the operator whose case is being elaborated

        def next_op():
            m.d.sync += [phase.eq(0), i.eq(0), j.eq(0), lane.eq(0), head.eq(0), have.eq(0)]
            if current["op"] == LAST_LAYER_OP:  # down_proj: the next layer, or the final norm
                with m.If(layer == n_layers - 1):
                    m.d.sync += pc.eq(pc + 1)
                with m.Else():
                    m.d.sync += [pc.eq(FIRST_LAYER_OP), layer.eq(layer + 1)]
            else:
                m.d.sync += pc.eq(pc + 1)

        def op_embed():
            with m.If(equals(phase, 0)):  # the row's multiplier
                m.d.comb += p_ready.eq(1)
                with m.If(p_valid):
                    m.d.sync += [p_mult.eq(param.mult), p_shift.eq(param.shift), phase.eq(1)]
            with m.If(equals(phase, 1)):
                with m.If(~have):
                    m.d.comb += w_ready.eq(1)
                    with m.If(w_valid):
                        m.d.sync += [beat.eq(w_beat), have.eq(1), lane.eq(0)]
                with m.Else():
                    element = Signal(signed(8))
                    m.d.comb += element.eq(beat.as_value().word_select(lane, 8).as_signed())
                    store_element(layout["r"] + i,
                                  requantize(m, element, p_mult, p_shift, 16), 1)
                    m.d.sync += [i.eq(i + 1), lane.eq(lane + 1)]
                    with m.If(equals(lane, lanes - 1)):
                        m.d.sync += have.eq(0)
                    with m.If(equals(i, c.hidden - 1)):
                        next_op()

        def op_norm(dst):
            with m.If(equals(phase, 0)):
                m.d.comb += [norm.cmd.valid.eq(1), norm.cmd.payload.length.eq(c.hidden),
                             norm.cmd.payload.eps_q.eq(q_model.eps_q)]
                with m.If(norm.cmd.ready):
                    m.d.sync += phase.eq(1)
            with m.If(equals(phase, 1)):  # ``i`` counts rows in, ``j`` elements out
                m.d.comb += [rd0.addr.eq(rows_of["r"] + i), norm.x.payload.eq(rd0.data),
                             norm.x.valid.eq(i < c.hidden // vw)]
                with m.If(norm.x.valid & norm.x.ready):
                    m.d.sync += i.eq(i + 1)
                m.d.comb += [norm.gain.valid.eq(p_valid),
                             norm.gain.payload.mult.eq(param.mult),
                             norm.gain.payload.shift.eq(param.shift),
                             p_ready.eq(norm.gain.ready),
                             norm.y.ready.eq(1)]
                store_element(layout[dst] + j, norm.y.payload.value, norm.y.valid)
                with m.If(norm.y.valid):
                    m.d.sync += j.eq(j + 1)
                    with m.If(norm.y.payload.last):
                        next_op()

        def op_linear(src, cols, rows, out_bits, sink, reuse=False):
            beats = -(-cols // lanes)
            with m.If(equals(phase, 0)):
                m.d.comb += [mvu.cmd.valid.eq(1), mvu.cmd.payload.rows.eq(rows),
                             mvu.cmd.payload.beats.eq(beats),
                             mvu.cmd.payload.out_bits.eq(out_bits),
                             mvu.cmd.payload.reuse.eq(reuse)]
                with m.If(mvu.cmd.ready):
                    m.d.sync += phase.eq(2 if reuse else 1)
            if not reuse:
                # load the vector, ``vw`` elements (one scratchpad row) a cycle and ``lanes`` a
                # beat; ``i`` counts rows, ``lane`` the rows of the beat
                with m.If(equals(phase, 1)):
                    with m.If(~have):
                        m.d.comb += rd0.addr.eq(rows_of[src] + i)
                        chunk = Signal(8 * vw)
                        m.d.comb += chunk.eq(low_bytes(rd0))
                        with m.If(i >= cols // vw):
                            m.d.comb += chunk.eq(0)
                        m.d.sync += [beat.as_value().word_select(lane, 8 * vw).eq(chunk),
                                     i.eq(i + 1), lane.eq(lane + 1)]
                        with m.If(equals(lane, lanes // vw - 1)):
                            m.d.sync += [have.eq(1), lane.eq(0)]
                    with m.Else():
                        m.d.comb += [mvu.vec.valid.eq(1), mvu.vec.payload.eq(beat)]
                        with m.If(mvu.vec.ready):
                            m.d.sync += have.eq(0)
                            with m.If(i >= beats * lanes // vw):
                                m.d.sync += phase.eq(2)
            with m.If(equals(phase, 2)):
                m.d.comb += [mvu.weights.valid.eq(w_valid), mvu.weights.payload.eq(w_beat),
                             w_ready.eq(mvu.weights.ready),
                             mvu.rowparam.valid.eq(p_valid),
                             mvu.rowparam.payload.bias.eq(param.value),
                             mvu.rowparam.payload.mult.eq(param.mult),
                             mvu.rowparam.payload.shift.eq(param.shift),
                             p_ready.eq(mvu.rowparam.ready)]
                value, last = mvu.out.payload.value, mvu.out.payload.last
                if sink == "sample":
                    m.d.comb += [sampler.logits.valid.eq(mvu.out.valid),
                                 sampler.logits.payload.value.eq(value),
                                 sampler.logits.payload.last.eq(last),
                                 mvu.out.ready.eq(sampler.logits.ready)]
                elif sink == "add":  # r[j] = sat16(r[j] + value)
                    total = Signal(signed(18))
                    m.d.comb += [total.eq(load_element(rd1, layout["r"] + j) + value),
                                 mvu.out.ready.eq(1)]
                    store_element(layout["r"] + j, saturate(m, total, 16), mvu.out.valid)
                elif sink == "swiglu":  # x[j] = swiglu(g[j], up[j]) as up[j] leaves
                    gate = load_element(rd1, layout["g"] + j)
                    m.d.comb += [swiglu.x.valid.eq(mvu.out.valid),
                                 swiglu.x.payload.gate.eq(gate[:8]),
                                 swiglu.x.payload.up.eq(value[:8]),
                                 swiglu.x.payload.last.eq(last),
                                 mvu.out.ready.eq(swiglu.x.ready), swiglu.y.ready.eq(1)]
                    store_element(layout["x"] + j, swiglu.y.payload.value, swiglu.y.valid)
                else:
                    m.d.comb += mvu.out.ready.eq(1)
                    store_element(layout[sink] + j, value, mvu.out.valid)
                with m.If(mvu.out.valid & mvu.out.ready):
                    m.d.sync += j.eq(j + 1)
                    with m.If(last):
                        next_op()

        def op_rope(buf, heads):  # in place, a scratchpad row a beat
            n = heads * hd // vw
            with m.If(equals(phase, 0)):
                m.d.comb += [rope.cmd.valid.eq(1), rope.cmd.payload.eq(token.pos)]
                with m.If(rope.cmd.ready):
                    m.d.sync += phase.eq(1)
            with m.If(equals(phase, 1)):
                m.d.comb += [rd0.addr.eq(rows_of[buf] + i),
                             rope.x.payload.value.eq(low_bytes(rd0)),
                             rope.x.payload.last.eq(equals(i, n - 1)), rope.x.valid.eq(i < n)]
                with m.If(rope.x.valid & rope.x.ready):
                    m.d.sync += i.eq(i + 1)
                m.d.comb += rope.y.ready.eq(1)
                store_row(rows_of[buf] + j, rope.y.payload.value, rope.y.valid)
                with m.If(rope.y.valid):
                    m.d.sync += j.eq(j + 1)
                    with m.If(rope.y.payload.last):
                        next_op()

        head_rows = hd // vw  # scratchpad rows of a head
        index_bits = max(1, (head_rows - 1).bit_length())

        def op_kv_write():
            with m.If(~have):  # gather K then V of one KV head, a scratchpad row a cycle
                with m.If(i < head_rows):
                    m.d.comb += rd0.addr.eq(rows_of["k"] + head * head_rows + i)
                    m.d.sync += krow.as_value().word_select(i[:index_bits], 8 * vw).eq(
                        low_bytes(rd0))
                with m.Else():
                    m.d.comb += rd0.addr.eq(rows_of["v"] + head * head_rows + i - head_rows)
                    m.d.sync += row.as_value().word_select((i - head_rows)[:index_bits],
                                                           8 * vw).eq(low_bytes(rd0))
                m.d.sync += i.eq(i + 1)
                with m.If(equals(i, 2 * head_rows - 1)):
                    m.d.sync += [have.eq(1), i.eq(0)]
            with m.Else():
                p = att.kv_write.payload
                m.d.comb += [att.kv_write.valid.eq(1), p.layer.eq(layer), p.kv_head.eq(head),
                             p.pos.eq(token.pos), p.k.eq(krow), p.v.eq(row)]
                with m.If(att.kv_write.ready):
                    m.d.sync += [have.eq(0), head.eq(head + 1)]
                    with m.If(equals(head, c.kv_heads - 1)):
                        next_op()

        def op_attention():
            # ``head`` is the job's first query head, ``lane`` counts its query beats sent
            with m.If(equals(phase, 0)):
                cmd = att.cmd.payload
                m.d.comb += [att.cmd.valid.eq(1), cmd.layer.eq(layer),
                             cmd.kv_head.eq(head // group if group > 1 else head),
                             cmd.length.eq(token.pos + 1),
                             cmd.exp_mult.eq(exp_mult), cmd.exp_shift.eq(exp_shift),
                             cmd.out_mult.eq(out_mult), cmd.out_shift.eq(out_shift)]
                with m.If(att.cmd.ready):
                    m.d.sync += [phase.eq(1), i.eq(0), j.eq(0), lane.eq(0)]
            with m.If(equals(phase, 1)):  # gather a query head, a scratchpad row a cycle
                m.d.comb += rd0.addr.eq(rows_of["q"] + (head + lane) * head_rows + i)
                m.d.sync += [row.as_value().word_select(i[:index_bits], 8 * vw).eq(
                                 low_bytes(rd0)),
                             i.eq(i + 1)]
                with m.If(equals(i, head_rows - 1)):
                    m.d.sync += phase.eq(2)
            with m.If(equals(phase, 2)):
                m.d.comb += [att.q.valid.eq(1), att.q.payload.eq(row)]
                with m.If(att.q.ready):
                    m.d.sync += [lane.eq(lane + 1), i.eq(0),
                                 phase.eq(Mux(equals(lane, hp - 1), 3, 1))]
            with m.If(equals(phase, 3)):  # ``j`` counts output rows
                m.d.comb += att.out.ready.eq(1)
                store_row(rows_of["a"] + head * head_rows + j, att.out.payload.value,
                          att.out.valid)
                with m.If(att.out.valid):
                    m.d.sync += j.eq(j + 1)
                    with m.If(att.out.payload.last):
                        m.d.sync += [head.eq(head + hp), phase.eq(0)]
                        with m.If(equals(head, c.heads - hp)):
                            next_op()

        def op_silu_table():
            m.d.comb += [swiglu.params.valid.eq(1),
                         swiglu.params.payload.mult.eq(act_mult),
                         swiglu.params.payload.shift.eq(act_shift),
                         p_ready.eq(1), swiglu.table.valid.eq(p_valid),
                         swiglu.table.payload.addr.eq(i[:8]),
                         swiglu.table.payload.value.eq(param.value[:16])]
            with m.If(p_valid):
                m.d.sync += i.eq(i + 1)
                with m.If(equals(i, 255)):
                    next_op()

        ops = [op_embed,
               lambda: op_norm("h"),
               lambda: op_linear("h", c.hidden, c.q_dim, OutBits.INT8, "q"),
               lambda: op_linear("h", c.hidden, c.kv_dim, OutBits.INT8, "k", reuse=True),
               lambda: op_linear("h", c.hidden, c.kv_dim, OutBits.INT8, "v", reuse=True),
               lambda: op_rope("q", c.heads),
               lambda: op_rope("k", c.kv_heads),
               op_kv_write,
               op_attention,
               lambda: op_linear("a", c.q_dim, c.hidden, OutBits.INT16, "add"),
               lambda: op_norm("h"),
               lambda: op_linear("h", c.hidden, c.ffn, OutBits.INT8, "g"),
               op_silu_table,
               lambda: op_linear("h", c.hidden, c.ffn, OutBits.INT8, "swiglu", reuse=True),
               lambda: op_linear("x", c.ffn, c.hidden, OutBits.INT16, "add")]
        assert len(ops) == LAST_LAYER_OP + 1
        ops.append(lambda: op_norm("h"))
        lm_head_op = len(ops)
        ops.append(lambda: op_linear("h", c.hidden, c.vocab, OutBits.INT32, "sample"))
        assert len(ops) == n_ops

        with m.If(running), m.Switch(pc):
            for k, op in enumerate(ops):
                current["op"] = k
                with m.Case(k):
                    if k == lm_head_op:
                        with m.If(~token.keep):
                            m.d.sync += running.eq(0)
                        with m.Else():
                            op()
                    else:
                        op()
            with m.Default():
                m.d.sync += running.eq(0)
        return m
