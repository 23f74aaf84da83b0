"""The sequencer's streams (:class:`~heteroreason.rtl.decoder.sequencer.Sequencer`): the
handshakes of the prefetch buffers, the readers and the units, their payloads, the gathers and
every operator's writes into the scratchpad, each elaborated once outside the operators'
cases from the registered flags, so that no program-counter decode reaches them."""

from amaranth.hdl import Cat, Const, Mux, Signal, Value, signed

from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.arith import saturate
from heteroreason.rtl.decoder.operators import Sink
from heteroreason.rtl.decoder.pipeline import GROUP_BITS

__all__ = ["SequencerStreams"]


class SequencerStreams:
    """The streams' half of :class:`~heteroreason.rtl.decoder.sequencer.Sequencer` (its state:
    the sequencer's constructor)."""

    def _load_beat(self, reader) -> None:
        """The beat: the embedding's row from the weights, shifted down a byte as each element
        is picked (:meth:`embed`); a product's vector, a scratchpad row at a time shifted in
        from the top of its ``lanes`` bytes (rows past the vector, from ``count[0]`` on, are
        zeros). Each :data:`GROUP_BITS` bits take their enables from their own copies of the
        flags (no control reaches the whole beat, no lane decode reaches any of it)."""
        m, f, w = self.m, self.flag, self.w
        beat, data = self.beat.as_value(), Value.cast(w.data)
        row_bits, vector_bits = 8 * self.p.vector_width, 8 * self.p.lanes
        shifted_down = Cat(beat[8:], Const(0, 8))
        vector = beat[:vector_bits]
        shifted_in = Cat(vector[row_bits:], Const(0, row_bits))  # the new row, set per group
        for k, lo in enumerate(range(0, len(beat), GROUP_BITS)):
            hi = min(len(beat), lo + GROUP_BITS)
            have, padding = self.have.copy(k), self.padding.copy(k)
            embedding, loading = f["embed_row"].copy(k), f["loading"].copy(k)
            with m.If(embedding & ~have & w.valid):
                m.d.sync += beat[lo:hi].eq(data[lo:hi])
            with m.Elif(embedding & have):
                m.d.sync += beat[lo:hi].eq(shifted_down[lo:hi])
            if lo < vector_bits:
                top = min(hi, vector_bits)
                row = Mux(padding, 0, self.sp.low_bytes(reader.row))
                new = Cat(shifted_in[:vector_bits - row_bits], row)
                with m.If(loading & ~have & (padding | reader.valid)):
                    m.d.sync += beat[lo:top].eq(new[lo:top])

    def feeds(self) -> None:
        """The handshakes of the prefetch buffers, the first reader and the units' data
        streams outside the matrix-vector unit, from the registered flags (elaborated once,
        outside the operators' cases): the first reader's ``ready`` and the buffers' depend
        on no program-counter decode."""
        m, f, sp, u, w, param = self.m, self.flag, self.sp, self.units, self.w, self.param
        # the sampler's ready a cycle late: only the LM head's logits make it busy, and they
        # follow this command, so an idle sampler stays idle until then
        self.sampler_idle = Signal(name="sampler_idle")
        m.d.sync += self.sampler_idle.eq(u.sampler.logits.ready)
        reader, mvu, norm, rope, att, swiglu = (sp.reader0, u.mvu, u.norm, u.rope, u.att,
                                                u.swiglu)
        self._load_beat(reader)
        # the vector's last row
        with m.If(f["loading"] & ~self.have & (self.padding | reader.valid)
                  & (self.i + 1 == self.count[0])):
            m.d.sync += self.padding.eq(1)
        m.d.comb += [
            w.ready.eq((self.streaming & mvu.weights.ready) | (f["embed_row"] & ~self.have)),
            param.ready.eq((self.streaming & mvu.rowparam.ready) | f["embed_param"]
                           | (self._gains_from_memory() & norm.gain.ready) | f["silu"]),
            # a vector loads while it has no beat; rows past it are zeros, and the reader
            # holds no more rows then
            reader.ready.eq((f["feed_norm"] & norm.x.ready) | (f["loading"] & ~self.have)
                            | (f["feed_rope"] & rope.x.ready) | f["gather"]),
            norm.x.payload.eq(reader.row), norm.x.valid.eq(f["feed_norm"] & reader.valid),
            norm.gain.valid.eq(f["feed_norm"] & (param.valid if self.batch == 1 else
                                                 Mux(self.first_tok, param.valid,
                                                     self.replay.valid))),
            norm.y.ready.eq(f["feed_norm"]),
            mvu.vec.payload.eq(self.beat if self.p.rows_per_beat == 1
                               else self.beat.as_value()[:8 * self.p.lanes]),
            mvu.vec.valid.eq(f["loading"] & self.have),
            rope.x.payload.value.eq(sp.low_bytes(reader.row)),
            rope.x.valid.eq(f["feed_rope"] & reader.valid), rope.y.ready.eq(f["feed_rope"]),
            att.q.payload.eq(self.row), att.q.valid.eq(f["send_q"]),
            att.out.ready.eq(f["draining"]), att.kv_write.valid.eq(f["send_kv"]),
            swiglu.params.valid.eq(f["silu"]), swiglu.table.valid.eq(f["silu"] & param.valid),
            swiglu.params.payload.mult.eq(self.act_mult),
            swiglu.params.payload.shift.eq(self.act_shift),
            swiglu.table.payload.addr.eq(self.silu_index[:8]),
            norm.cmd.valid.eq(f["cmd_norm"]),
            # the commands' payloads: registers and constants, whatever the operator
            norm.cmd.payload.length.eq(self.c.hidden),
            norm.cmd.payload.eps_q.eq(self.q_model.eps_q),
            mvu.cmd.payload.eq(self.mvu_cmd), rope.cmd.payload.eq(self.pos),
            *self._attention_payloads(),
            # the LM head begins when the sampler is idle: it takes a logit every cycle then
            mvu.cmd.valid.eq(f["cmd_mvu"] | (f["cmd_sample"] & self.sampler_idle)),
            rope.cmd.valid.eq(f["cmd_rope"]), att.cmd.valid.eq(f["cmd_att"]),
        ]

    def _attention_payloads(self):
        """The attention's command (a job's query heads from ``head``) and its KV write (KV
        head ``head``), from registers."""
        c, att, head = self.c, self.units.att, self.head
        group = c.heads // c.kv_heads
        cmd, kv = att.cmd.payload, att.kv_write.payload
        return [cmd.layer.eq(self.layer),
                cmd.kv_head.eq(head // group if group > 1 else head),
                cmd.length.eq(self.pos + 1),
                cmd.exp_mult.eq(self.exp_mult), cmd.exp_shift.eq(self.exp_shift),
                cmd.out_mult.eq(self.out_mult), cmd.out_shift.eq(self.out_shift),
                kv.layer.eq(self.layer), kv.kv_head.eq(head), kv.pos.eq(self.pos),
                kv.k.eq(self.krow), kv.v.eq(self.row),
                *([cmd.ctx.eq(self.ctx), kv.ctx.eq(self.ctx)] if self.p.contexts > 1 else [])]

    def gathers(self) -> None:
        """A gathered row into ``krow`` or ``row`` (element ``i``'s row of a head), on the
        registered ``gather`` flag and ``gather_k`` (elaborated once, outside the operators'
        cases: no program-counter decode reaches the rows' enables); the cases count the rows
        and end the gathers."""
        m, sp, reader, vw = self.m, self.sp, self.sp.reader0, self.p.vector_width
        index = self.i[:self.index_bits]
        with m.If(self.flag["gather"] & reader.valid):
            with m.If(self.gather_k):
                m.d.sync += self.krow.as_value().word_select(index, 8 * vw).eq(
                    sp.low_bytes(reader.row))
            with m.Else():
                m.d.sync += self.row.as_value().word_select(index, 8 * vw).eq(
                    sp.low_bytes(reader.row))

    def matvec_streams(self) -> None:
        """The prefetch buffers' payloads to the units, the weight and row-parameter streams'
        valid to the matrix-vector unit (their ready: :meth:`feeds`) and where its results go,
        from the registered flags (elaborated once, outside the operators' cases)."""
        m, mvu, w, param, sp = self.m, self.units.mvu, self.w, self.param, self.sp
        # the prefetch buffers' payloads go to every unit that reads them ungated (a block
        # RAM's output has most of a cycle's time spent before it): only valid and ready
        # follow the operator
        norm, swiglu = self.units.norm, self.units.swiglu
        entry, g, r = self.param_entry(0), self.p.param_width, self.p.rows_per_beat
        source = param.data
        if self.batch > 1:  # the first token's gains from memory, the others' replayed
            source = Signal(param.data.shape(), name="gain_source")
            m.d.comb += source.eq(Mux(self.first_tok, param.data.as_value(),
                                      self.replay.row.as_value()))
        gains = [(norm.gain.payload, source)] if g == 1 else \
            [(norm.gain.payload[t], source[t]) for t in range(g)]
        rowparams = [(mvu.rowparam.payload, entry)] if r == 1 else \
            [(mvu.rowparam.payload[t], param.data[t]) for t in range(r)]
        m.d.comb += [mvu.weights.payload.eq(w.data),
                     *(x for row, e in rowparams for x in (row.bias.eq(e.value),
                                                           row.mult.eq(e.mult),
                                                           row.shift.eq(e.shift))),
                     *(x for gain, e in gains for x in (gain.mult.eq(e.mult),
                                                         gain.shift.eq(e.shift))),
                     swiglu.table.payload.value.eq(entry.value[:16])]
        m.d.comb += [mvu.weights.valid.eq(self.streaming & w.valid),
                     mvu.rowparam.valid.eq(self.streaming & param.valid)]
        # the results: to the sampler, added to the residual, through SwiGLU with the gate
        # (both read by the second reader as the results leave), or stored
        flag, reader, j = self.sink_of, sp.reader1, self.j
        sampler, swiglu = self.units.sampler, self.units.swiglu
        value, last = mvu.out.payload.value, mvu.out.payload.last
        # the LM head's logits reach the sampler through a register (:data:`LOGIT_LATENCY`):
        # the running maximum's comparison has the cycle to itself. The sampler takes every
        # one (it is idle when the LM head begins: ``cmd_sample``)
        self.logit = Signal(sampler.logits.payload.shape(), name="logit")
        self.logit_valid = Signal(name="logit_valid")
        m.d.sync += [self.logit_valid.eq(flag[Sink.SAMPLE] & mvu.out.valid),
                     self.logit.value.eq(value if self.batch == 1 or self.p.contexts > 1
                                         else self._last_tokens(value)),
                     self.logit.last.eq(last)]
        # the reader's row is done with its last element (or the vector's)
        row_done = (equals(j[:sp.shift], self.p.vector_width - r) if sp.shift else 1) | last
        m.d.comb += [
            mvu.out.ready.eq(flag[Sink.SAMPLE]  # the sampler is ready (see ``cmd_sample``)
                             | (flag[Sink.ADD] & reader.valid)
                             | (flag[Sink.SWIGLU] & swiglu.x.ready & reader.valid)
                             | flag[Sink.STORE]),
            sampler.logits.valid.eq(self.logit_valid), sampler.logits.payload.eq(self.logit),
            swiglu.x.valid.eq(flag[Sink.SWIGLU] & mvu.out.valid & reader.valid),
            *self._swiglu_inputs(reader, value),
            swiglu.x.payload.last.eq(last),
            reader.ready.eq(mvu.out.valid & row_done
                            & (flag[Sink.ADD] | (flag[Sink.SWIGLU] & swiglu.x.ready))),
            swiglu.y.ready.eq(flag[Sink.SWIGLU]),
        ]

    def _gains_from_memory(self):
        """The norm takes its gains from memory, i.e. from the parameter stream (with a batch,
        only the first token's; the others' come from the on-chip copy, see
        :meth:`_keep_gains`)."""
        if self.batch == 1:
            return self.flag["feed_norm"]
        return self.flag["feed_norm"] & self.first_tok

    def _keep_gains(self) -> None:
        """A batch's first token's norm gains into the gain memory as the norm takes them; the
        other tokens' norms read them back (``replay``, started with the norm)."""
        m, norm, param = self.m, self.units.norm, self.param
        taken = self._gains_from_memory() & param.valid & norm.gain.ready
        m.d.comb += [self.gain_write.addr.eq(self.gain_count),
                     self.gain_write.data.eq(param.data), self.gain_write.en.eq(taken),
                     self.replay.ready.eq(self.flag["feed_norm"] & ~self.first_tok
                                          & norm.gain.ready)]
        with m.If(taken):
            m.d.sync += self.gain_count.eq(self.gain_count + 1)

    def _swiglu_inputs(self, reader, value):
        """SwiGLU's gate (the second reader's element or span) and up (the result) of every
        lane: ``rows_per_beat`` of each of the batch's tokens."""
        sp, j, r, x = self.sp, self.j, self.p.rows_per_beat, self.units.swiglu.x.payload
        if self.batch == 1 and r == 1:
            return [x.gate.eq(sp.element(reader.row, j)[:8]), x.up.eq(value[:8])]
        rows = [reader.row] if self.batch == 1 else reader.rows
        return [a for b, row in enumerate(rows) for t, gate in enumerate(sp.span(row, j, r))
                for a in (x.gate[b * r + t].eq(gate[:8]), x.up[b * r + t].eq(value[b * r + t][:8]))]

    def _last_tokens(self, value):
        """The batch's last token's ``rows_per_beat`` results of the matrix-vector unit's
        ``value`` (the logits a batch keeps)."""
        width = 32 * self.p.rows_per_beat
        chosen = value.as_value()[:width]
        for b in range(1, self.batch):
            chosen = Mux(equals(self.last_tok, b), value.as_value()[b * width:(b + 1) * width],
                         chosen)
        return chosen

    def writes(self) -> None:
        """Every operator's writes into the scratchpad (elaborated once, outside the cases;
        :meth:`Scratchpad.write`): the embedding's elements, the norm's, a product's results
        stored, added into the residual (``r[j] = sat16(r[j] + value)``, the residual read by
        the second reader as the results leave) or through SwiGLU, RoPE's rows in place, the
        attention's output rows."""
        m, sp, f, sink, u, j = self.m, self.sp, self.flag, self.sink_of, self.units, self.j
        reader, value = sp.reader1, u.mvu.out.payload.value
        # the norm's results: an element a cycle, or ``param_width`` (a span of a row)
        norm = (f["feed_norm"], u.norm.y.valid, j, u.norm.y.payload.value)
        wide = self.p.param_width > 1
        r = self.p.rows_per_beat
        if self.batch > 1:
            self._keep_gains()
            self._banked_writes(norm)
            return
        if r == 1:
            total = Signal(signed(18))
            m.d.comb += total.eq(sp.element(reader.row, j) + value)
            products = [
                (sink[Sink.STORE], u.mvu.out.valid, j, value[:16]),
                (sink[Sink.ADD], u.mvu.out.valid & reader.valid, j, saturate(m, total, 16)),
                (sink[Sink.SWIGLU], u.swiglu.y.valid, self.k, u.swiglu.y.payload.value)]
        else:  # ``rows_per_beat`` results a cycle: spans of a row
            totals = []
            for t, residual in enumerate(sp.span(reader.row, j, r)):
                total = Signal(signed(18), name=f"total{t}")
                m.d.comb += total.eq(residual + value[t])
                totals.append(saturate(m, total, 16))
            products = [
                (sink[Sink.STORE], u.mvu.out.valid, j, [value[t][:16] for t in range(r)]),
                (sink[Sink.ADD], u.mvu.out.valid & reader.valid, j, totals),
                (sink[Sink.SWIGLU], u.swiglu.y.valid, self.k,
                 [u.swiglu.y.payload.value[t] for t in range(r)])]
        sp.write(self.w_base, [
            (f["embedding"], self.embed_stored, self.embed_index, self.embed_value),
            *([] if wide else [norm]),
            *(products if r == 1 else []),
        ], [
            (f["feed_rope"], u.rope.y.valid, j, u.rope.y.payload.value),
            (f["draining"], u.att.out.valid, self.drain_head * self.head_rows + j,
             u.att.out.payload.value),
        ], ([norm] if wide else []) + ([] if r == 1 else products))

    def _banked_writes(self, norm) -> None:
        """:meth:`writes` with a bank per token: the operators that run token by token write
        the bank of the token (``tok``), the matrix-vector sinks every bank at once, each its
        token's ``rows_per_beat`` results (spans of a row, one element wide at one a beat)."""
        m, sp, f, sink, u, j = self.m, self.sp, self.flag, self.sink_of, self.units, self.j
        reader, value, r = sp.reader1, u.mvu.out.payload.value, self.p.rows_per_beat
        wide = self.p.param_width > 1
        for b, bank in enumerate(sp.banks):
            mine = equals(self.tok, b)
            totals = []
            for t, residual in enumerate(sp.span(reader.rows[b], j, r)):
                total = Signal(signed(18), name=f"total{b}_{t}")
                m.d.comb += total.eq(residual + value[b * r + t])
                totals.append(saturate(m, total, 16))
            products = [
                (sink[Sink.STORE], u.mvu.out.valid, j, [value[b * r + t][:16] for t in range(r)]),
                (sink[Sink.ADD], u.mvu.out.valid & reader.valid, j, totals),
                (sink[Sink.SWIGLU], u.swiglu.y.valid, self.k,
                 [u.swiglu.y.payload.value[b * r + t] for t in range(r)])]
            norm_b = (norm[0] & mine, *norm[1:])
            bank.write(self.w_base, [
                (f["embedding"] & mine, self.embed_stored, self.embed_index, self.embed_value),
                *([] if wide else [norm_b]),
            ], [
                (f["feed_rope"] & mine, u.rope.y.valid, j, u.rope.y.payload.value),
                (f["draining"] & mine, u.att.out.valid, self.drain_head * self.head_rows + j,
                 u.att.out.payload.value),
            ], ([norm_b] if wide else []) + products)
