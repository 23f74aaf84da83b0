"""Decoder core: one token through the whole draft model, operator by operator, on one set of
units (:mod:`heteroreason.rtl.mvu`, ``rmsnorm``, ``rope``, ``attention``, ``swiglu``,
``sampler``) reused across layers, with weights and parameters read from memory in the order of
:func:`heteroreason.model.decode_schedule.decode_schedule`."""

from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model.decode_schedule import Region, decode_schedule
from heteroreason.model.qwen2_int8 import QuantizedModel
from heteroreason.rtl.arith import requantize, saturate
from heteroreason.rtl.attention import Attention
from heteroreason.rtl.compare import equals
from heteroreason.rtl.mvu import MatVecUnit, OutBits
from heteroreason.rtl.rmsnorm import RmsNorm
from heteroreason.rtl.rope import Rope
from heteroreason.rtl.sampler import ArgmaxSampler
from heteroreason.rtl.swiglu import SwiGlu

__all__ = ["DecoderCore"]


class DecoderCore(wiring.Component):
    """The integer reference's decode step (:class:`heteroreason.model.qwen2_int8.IntDecoder`)
    in hardware, one token at a time.

    A beat on ``token`` (id, KV position, whether its logits are kept) runs the token through
    every layer — its KV entries are written at ``pos`` — and, when its logits are kept, the LM
    head and the sampler, whose result leaves on ``sample``. Weight beats are requested on
    ``wreq`` and arrive on ``wdata``; parameter beats likewise on ``preq``/``pdata``; both in
    :func:`~heteroreason.model.decode_schedule.decode_schedule` order. The model's scalar
    constants (RMSNorm epsilon, attention and SwiGLU multipliers, RoPE increments) are fixed at
    elaboration; the weights are data.

    Activations live in one on-chip scratchpad (16-bit words); operators run one after the other
    (no overlap yet), each streaming between the scratchpad and its unit one element per cycle,
    the matrix-vector unit at ``lanes`` MACs per cycle.

    Parameters
    ----------
    model : QuantizedModel
        The quantized model whose constants and shapes the core is built for.
    lanes : int
        MACs per cycle (weights per beat); must divide the hidden size.
    delimiters, eos
        Step-delimiter and end-of-sequence ids for the sampler's marks.

    Members
    -------
    token : In(stream.Signature(StructLayout token, pos, keep))
    sample : Out(stream.Signature(StructLayout token, step_end, eos))
    wreq, preq : Out(stream.Signature(StructLayout addr, count))
    wdata : In(stream.Signature(ArrayLayout(signed(8), lanes)))
    pdata : In(stream.Signature(StructLayout value signed(32), mult, shift))
    busy : Out(1)
    """

    def __init__(self, *, model: QuantizedModel, lanes: int, delimiters=(), eos=0):
        if not isinstance(model, QuantizedModel):
            raise TypeError(f"model must be a QuantizedModel, not {type(model).__name__}")
        self._model = model
        self._schedule = decode_schedule(model, lanes=lanes)  # validates lanes
        self._lanes = lanes
        self._delimiters = tuple(delimiters)
        self._eos = eos
        c = model.config
        self._config = c
        w_beats = len(self._schedule.weight_image)
        p_beats = len(self._schedule.param_image)
        largest = max(r.count for r in self._schedule.regions.values())
        request = data.StructLayout({"addr": range(max(w_beats, p_beats)),
                                     "count": range(largest + 1)})
        super().__init__({
            "token": In(stream.Signature(data.StructLayout({
                "token": range(c.vocab), "pos": range(c.max_context), "keep": 1}))),
            "sample": Out(stream.Signature(data.StructLayout({
                "token": range(c.vocab), "step_end": 1, "eos": 1}))),
            "wreq": Out(stream.Signature(request)),
            "preq": Out(stream.Signature(request)),
            "wdata": In(stream.Signature(data.ArrayLayout(signed(8), lanes))),
            "pdata": In(stream.Signature(data.StructLayout({
                "value": signed(32), "mult": unsigned(31), "shift": unsigned(6)}))),
            "busy": Out(1),
        })

    @property
    def schedule(self):
        return self._schedule

    @property
    def lanes(self):
        return self._lanes

    def elaborate(self, platform):
        m = Module()
        c, q_model, sched, lanes = self._config, self._model, self._schedule, self._lanes
        regions = sched.regions
        group = c.heads // c.kv_heads
        hd = c.head_dim

        mvu = MatVecUnit(lanes=lanes, max_beats=-(-max(c.hidden, c.ffn, c.q_dim) // lanes),
                         max_rows=max(c.vocab, c.ffn, c.hidden, c.q_dim))
        norm = RmsNorm(max_length=c.hidden)
        rope = Rope(head_dim=hd, increments=q_model.rope_inc, max_position=c.max_context - 1)
        att = Attention(head_dim=hd, kv_heads=c.kv_heads, layers=len(q_model.layers),
                        max_context=c.max_context)
        swiglu = SwiGlu()
        sampler = ArgmaxSampler(vocab=c.vocab, delimiters=self._delimiters, eos=self._eos)
        m.submodules.mvu, m.submodules.norm, m.submodules.rope = mvu, norm, rope
        m.submodules.att, m.submodules.swiglu, m.submodules.sampler = att, swiglu, sampler
        wiring.connect(m, sampler.token, wiring.flipped(self.sample))

        # scratchpad layout (16-bit words)
        layout, at = {}, 0
        for name, size in (("r", c.hidden), ("h", c.hidden), ("q", c.q_dim), ("k", c.kv_dim),
                           ("v", c.kv_dim), ("a", c.q_dim), ("g", c.ffn), ("u", c.ffn),
                           ("x", c.ffn)):
            layout[name] = at
            at += size
        m.submodules.scratch = scratch = memory.Memory(shape=signed(16), depth=at, init=[])
        self._scratch, self._layout = scratch, layout  # for testbenches that probe activations
        rd0 = scratch.read_port(domain="comb")
        rd1 = scratch.read_port(domain="comb")
        wr = scratch.write_port()

        token = Signal(self.token.payload.shape())
        running = Signal()
        pc = Signal(range(256))
        phase = Signal(range(8))
        i = Signal(range(max(c.vocab, c.ffn, 256) + 1))
        j = Signal(range(max(c.vocab, c.ffn, 256) + 1))
        lane = Signal(range(lanes + 1))
        head = Signal(range(max(c.heads, 1) + 1))
        beat = Signal(data.ArrayLayout(signed(8), lanes))
        row = Signal(data.ArrayLayout(signed(8), hd))
        krow = Signal(data.ArrayLayout(signed(8), hd))
        have = Signal()
        req_w, req_p = Signal(), Signal()  # requests still to be sent
        p_mult, p_shift = Signal(unsigned(31)), Signal(unsigned(6))

        m.d.comb += [self.busy.eq(running), self.token.ready.eq(~running)]
        with m.If(self.token.valid & ~running):
            m.d.sync += [token.eq(self.token.payload), running.eq(1), pc.eq(0), phase.eq(0),
                         i.eq(0), j.eq(0), lane.eq(0), head.eq(0), have.eq(0)]

        def next_op():
            m.d.sync += [pc.eq(pc + 1), phase.eq(0), i.eq(0), j.eq(0), lane.eq(0),
                         head.eq(0), have.eq(0)]

        def issue(w_region=None, p_region=None, w_addr=None, p_addr=None):
            """Phase 0 of an op: send its requests, then phase 1."""
            with m.If(equals(phase, 0)):
                m.d.sync += [req_w.eq(w_region is not None), req_p.eq(p_region is not None),
                             phase.eq(1)]
            if w_region is not None:
                m.d.comb += [self.wreq.valid.eq(req_w),
                             self.wreq.payload.addr.eq(w_addr if w_addr is not None
                                                       else w_region.start),
                             self.wreq.payload.count.eq(w_region.count)]
                with m.If(self.wreq.valid & self.wreq.ready):
                    m.d.sync += req_w.eq(0)
            if p_region is not None:
                m.d.comb += [self.preq.valid.eq(req_p),
                             self.preq.payload.addr.eq(p_addr if p_addr is not None
                                                       else p_region.start),
                             self.preq.payload.count.eq(p_region.count)]
                with m.If(self.preq.valid & self.preq.ready):
                    m.d.sync += req_p.eq(0)

        def op_embed():
            embed, params = regions["embed"], regions["embed_params"]
            row_region = Region("embed_row", "weights", 0, sched.embed_row_beats)
            param_region = Region("embed_row_param", "params", 0, 1)
            issue(row_region, param_region,
                  w_addr=embed.start + token.token * sched.embed_row_beats,
                  p_addr=params.start + token.token)
            with m.If(equals(phase, 1)):  # the row's multiplier
                m.d.comb += self.pdata.ready.eq(1)
                with m.If(self.pdata.valid):
                    m.d.sync += [p_mult.eq(self.pdata.payload.mult),
                                 p_shift.eq(self.pdata.payload.shift), phase.eq(2)]
            with m.If(equals(phase, 2)):
                with m.If(~have):
                    m.d.comb += self.wdata.ready.eq(1)
                    with m.If(self.wdata.valid):
                        m.d.sync += [beat.eq(self.wdata.payload), have.eq(1), lane.eq(0)]
                with m.Else():
                    element = Signal(signed(8))
                    m.d.comb += element.eq(beat.as_value().word_select(lane, 8).as_signed())
                    m.d.comb += [wr.addr.eq(layout["r"] + i),
                                 wr.data.eq(requantize(m, element, p_mult, p_shift, 16)),
                                 wr.en.eq(1)]
                    m.d.sync += [i.eq(i + 1), lane.eq(lane + 1)]
                    with m.If(equals(lane, lanes - 1)):
                        m.d.sync += have.eq(0)
                    with m.If(equals(i, c.hidden - 1)):
                        next_op()

        def op_norm(gains, dst):
            issue(None, gains)
            with m.If(equals(phase, 1)):
                m.d.comb += [norm.cmd.valid.eq(1), norm.cmd.payload.length.eq(c.hidden),
                             norm.cmd.payload.eps_q.eq(q_model.eps_q)]
                with m.If(norm.cmd.ready):
                    m.d.sync += phase.eq(2)
            with m.If(equals(phase, 2)):
                m.d.comb += [rd0.addr.eq(layout["r"] + i), norm.x.payload.eq(rd0.data),
                             norm.x.valid.eq(i < c.hidden)]
                with m.If(norm.x.valid & norm.x.ready):
                    m.d.sync += i.eq(i + 1)
                m.d.comb += [norm.gain.valid.eq(self.pdata.valid),
                             norm.gain.payload.mult.eq(self.pdata.payload.mult),
                             norm.gain.payload.shift.eq(self.pdata.payload.shift),
                             self.pdata.ready.eq(norm.gain.ready),
                             norm.y.ready.eq(1),
                             wr.addr.eq(layout[dst] + j), wr.data.eq(norm.y.payload.value),
                             wr.en.eq(norm.y.valid)]
                with m.If(norm.y.valid):
                    m.d.sync += j.eq(j + 1)
                    with m.If(norm.y.payload.last):
                        next_op()

        def op_linear(name, src, cols, rows, out_bits, sink):
            w_region, p_region = regions[name], regions[name + ".params"]
            beats = -(-cols // lanes)
            issue(w_region, p_region)
            with m.If(equals(phase, 1)):
                m.d.comb += [mvu.cmd.valid.eq(1), mvu.cmd.payload.rows.eq(rows),
                             mvu.cmd.payload.beats.eq(beats),
                             mvu.cmd.payload.out_bits.eq(out_bits)]
                with m.If(mvu.cmd.ready):
                    m.d.sync += phase.eq(2)
            with m.If(equals(phase, 2)):  # load the vector, lanes elements a beat
                with m.If(~have):
                    m.d.comb += rd0.addr.eq(layout[src] + i)
                    element = Signal(signed(8))
                    m.d.comb += element.eq(rd0.data)
                    with m.If(i >= cols):
                        m.d.comb += element.eq(0)
                    m.d.sync += [beat.as_value().word_select(lane, 8).eq(element),
                                 i.eq(i + 1), lane.eq(lane + 1)]
                    with m.If(equals(lane, lanes - 1)):
                        m.d.sync += [have.eq(1), lane.eq(0)]
                with m.Else():
                    m.d.comb += [mvu.vec.valid.eq(1), mvu.vec.payload.eq(beat)]
                    with m.If(mvu.vec.ready):
                        m.d.sync += have.eq(0)
                        with m.If(i >= beats * lanes):
                            m.d.sync += phase.eq(3)
            with m.If(equals(phase, 3)):
                m.d.comb += [mvu.weights.valid.eq(self.wdata.valid),
                             mvu.weights.payload.eq(self.wdata.payload),
                             self.wdata.ready.eq(mvu.weights.ready),
                             mvu.rowparam.valid.eq(self.pdata.valid),
                             mvu.rowparam.payload.bias.eq(self.pdata.payload.value),
                             mvu.rowparam.payload.mult.eq(self.pdata.payload.mult),
                             mvu.rowparam.payload.shift.eq(self.pdata.payload.shift),
                             self.pdata.ready.eq(mvu.rowparam.ready)]
                value, last = mvu.out.payload.value, mvu.out.payload.last
                if sink == "sample":
                    m.d.comb += [sampler.logits.valid.eq(mvu.out.valid),
                                 sampler.logits.payload.value.eq(value),
                                 sampler.logits.payload.last.eq(last),
                                 mvu.out.ready.eq(sampler.logits.ready)]
                elif sink == "add":  # r[j] = sat16(r[j] + value)
                    total = Signal(signed(18))
                    m.d.comb += [rd1.addr.eq(layout["r"] + j), total.eq(rd1.data + value),
                                 mvu.out.ready.eq(1), wr.addr.eq(layout["r"] + j),
                                 wr.data.eq(saturate(m, total, 16)), wr.en.eq(mvu.out.valid)]
                else:
                    m.d.comb += [mvu.out.ready.eq(1), wr.addr.eq(layout[sink] + j),
                                 wr.data.eq(value), wr.en.eq(mvu.out.valid)]
                with m.If(mvu.out.valid & mvu.out.ready):
                    m.d.sync += j.eq(j + 1)
                    with m.If(last):
                        next_op()

        def op_rope(buf, heads):
            n = heads * hd
            with m.If(equals(phase, 0)):
                m.d.comb += [rope.cmd.valid.eq(1), rope.cmd.payload.eq(token.pos)]
                with m.If(rope.cmd.ready):
                    m.d.sync += phase.eq(1)
            with m.If(equals(phase, 1)):
                m.d.comb += [rd0.addr.eq(layout[buf] + i), rope.x.payload.value.eq(rd0.data),
                             rope.x.payload.last.eq(equals(i, n - 1)), rope.x.valid.eq(i < n)]
                with m.If(rope.x.valid & rope.x.ready):
                    m.d.sync += i.eq(i + 1)
                m.d.comb += [rope.y.ready.eq(1), wr.addr.eq(layout[buf] + j),
                             wr.data.eq(rope.y.payload.value), wr.en.eq(rope.y.valid)]
                with m.If(rope.y.valid):
                    m.d.sync += j.eq(j + 1)
                    with m.If(rope.y.payload.last):
                        next_op()

        index_bits = max(1, (hd - 1).bit_length())

        def op_kv_write(layer):
            with m.If(~have):  # gather K then V of one KV head, an element a cycle
                with m.If(i < hd):
                    m.d.comb += rd0.addr.eq(layout["k"] + head * hd + i)
                    m.d.sync += krow.as_value().word_select(i[:index_bits], 8).eq(rd0.data[:8])
                with m.Else():
                    m.d.comb += rd0.addr.eq(layout["v"] + head * hd + i - hd)
                    m.d.sync += row.as_value().word_select((i - hd)[:index_bits], 8).eq(
                        rd0.data[:8])
                m.d.sync += i.eq(i + 1)
                with m.If(equals(i, 2 * hd - 1)):
                    m.d.sync += [have.eq(1), i.eq(0)]
            with m.Else():
                p = att.kv_write.payload
                m.d.comb += [att.kv_write.valid.eq(1), p.layer.eq(layer), p.kv_head.eq(head),
                             p.pos.eq(token.pos), p.k.eq(krow), p.v.eq(row)]
                with m.If(att.kv_write.ready):
                    m.d.sync += [have.eq(0), head.eq(head + 1)]
                    with m.If(equals(head, c.kv_heads - 1)):
                        next_op()

        def op_attention(layer):
            ql = q_model.layers[layer]
            with m.If(equals(phase, 0)):
                cmd = att.cmd.payload
                m.d.comb += [att.cmd.valid.eq(1), cmd.layer.eq(layer),
                             cmd.kv_head.eq(head // group if group > 1 else head),
                             cmd.length.eq(token.pos + 1),
                             cmd.exp_mult.eq(int(ql.exp_req[0])),
                             cmd.exp_shift.eq(int(ql.exp_req[1])),
                             cmd.out_mult.eq(int(ql.attn_req[0])),
                             cmd.out_shift.eq(int(ql.attn_req[1]))]
                with m.If(att.cmd.ready):
                    m.d.sync += [phase.eq(1), i.eq(0), j.eq(0)]
            with m.If(equals(phase, 1)):  # gather the query head
                m.d.comb += rd0.addr.eq(layout["q"] + head * hd + i)
                m.d.sync += [row.as_value().word_select(i[:index_bits], 8).eq(rd0.data[:8]),
                             i.eq(i + 1)]
                with m.If(equals(i, hd - 1)):
                    m.d.sync += phase.eq(2)
            with m.If(equals(phase, 2)):
                m.d.comb += [att.q.valid.eq(1), att.q.payload.eq(row)]
                with m.If(att.q.ready):
                    m.d.sync += phase.eq(3)
            with m.If(equals(phase, 3)):
                m.d.comb += [att.out.ready.eq(1), wr.addr.eq(layout["a"] + head * hd + j),
                             wr.data.eq(att.out.payload.value), wr.en.eq(att.out.valid)]
                with m.If(att.out.valid):
                    m.d.sync += j.eq(j + 1)
                    with m.If(att.out.payload.last):
                        m.d.sync += [head.eq(head + 1), phase.eq(0)]
                        with m.If(equals(head, c.heads - 1)):
                            next_op()

        def op_swiglu(layer):
            ql = q_model.layers[layer]
            issue(None, regions[f"layer{layer}.silu"])
            with m.If(equals(phase, 1)):
                m.d.comb += [swiglu.params.valid.eq(1),
                             swiglu.params.payload.mult.eq(int(ql.act_req[0])),
                             swiglu.params.payload.shift.eq(int(ql.act_req[1]))]
                m.d.sync += phase.eq(2)
            with m.If(equals(phase, 2)):  # the SiLU table, 256 parameter beats
                m.d.comb += [self.pdata.ready.eq(1), swiglu.table.valid.eq(self.pdata.valid),
                             swiglu.table.payload.addr.eq(i[:8]),
                             swiglu.table.payload.value.eq(self.pdata.payload.value[:16])]
                with m.If(self.pdata.valid):
                    m.d.sync += i.eq(i + 1)
                    with m.If(equals(i, 255)):
                        m.d.sync += [i.eq(0), phase.eq(3)]
            with m.If(equals(phase, 3)):
                m.d.comb += [rd0.addr.eq(layout["g"] + i), rd1.addr.eq(layout["u"] + i),
                             swiglu.x.valid.eq(1), swiglu.x.payload.gate.eq(rd0.data[:8]),
                             swiglu.x.payload.up.eq(rd1.data[:8]),
                             swiglu.x.payload.last.eq(equals(i, c.ffn - 1)),
                             swiglu.y.ready.eq(1), wr.addr.eq(layout["x"] + i),
                             wr.data.eq(swiglu.y.payload.value), wr.en.eq(1)]
                m.d.sync += i.eq(i + 1)
                with m.If(equals(i, c.ffn - 1)):
                    next_op()

        ops = [op_embed]
        for layer in range(len(q_model.layers)):
            p = f"layer{layer}."
            ops += [
                lambda p=p: op_norm(regions[p + "norm1"], "h"),
                lambda p=p: op_linear(p + "q_proj", "h", c.hidden, c.q_dim, OutBits.INT8, "q"),
                lambda p=p: op_linear(p + "k_proj", "h", c.hidden, c.kv_dim, OutBits.INT8, "k"),
                lambda p=p: op_linear(p + "v_proj", "h", c.hidden, c.kv_dim, OutBits.INT8, "v"),
                lambda: op_rope("q", c.heads),
                lambda: op_rope("k", c.kv_heads),
                lambda layer=layer: op_kv_write(layer),
                lambda layer=layer: op_attention(layer),
                lambda p=p: op_linear(p + "o_proj", "a", c.q_dim, c.hidden, OutBits.INT16,
                                      "add"),
                lambda p=p: op_norm(regions[p + "norm2"], "h"),
                lambda p=p: op_linear(p + "gate_proj", "h", c.hidden, c.ffn, OutBits.INT8,
                                      "g"),
                lambda p=p: op_linear(p + "up_proj", "h", c.hidden, c.ffn, OutBits.INT8, "u"),
                lambda layer=layer: op_swiglu(layer),
                lambda p=p: op_linear(p + "down_proj", "x", c.ffn, c.hidden, OutBits.INT16,
                                      "add"),
            ]
        ops.append(lambda: op_norm(regions["final_norm"], "h"))
        lm_head_op = len(ops)
        ops.append(lambda: op_linear("lm_head", "h", c.hidden, c.vocab, OutBits.INT32,
                                     "sample"))

        with m.If(running), m.Switch(pc):
            for k, op in enumerate(ops):
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
