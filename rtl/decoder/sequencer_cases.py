"""The operators' cases of the sequencer (:class:`~heteroreason.rtl.decoder.sequencer.
Sequencer`): one method per unit that elaborates an operator's case of the program counter,
and the embedding's requantizer they feed."""

from amaranth.hdl import Const, Mux, Signal, signed

from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.operators import Operator, Sink
from heteroreason.rtl.decoder.pipeline import REQUANT_LATENCY, delay, requantize_pipelined

__all__ = ["EMBED_LATENCY", "SequencerCases"]

EMBED_LATENCY = 1 + REQUANT_LATENCY  # an embedding element picked -> stored


class SequencerCases:
    """The operators' half of :class:`~heteroreason.rtl.decoder.sequencer.Sequencer` (its
    state: the sequencer's constructor)."""

    def _embed_pipeline(self) -> None:
        """The embedding's requantizer: an element picked from the row's beat (its lowest byte:
        the beat shifts down a byte as each is picked, :meth:`embed`; no multiplexer over the
        beat's bytes) is requantized in :data:`EMBED_LATENCY` cycles (it never stalls) and
        stored where its index says."""
        m, c = self.m, self.c
        self.embed_pick = Signal(name="embed_pick")  # an element enters this cycle
        element = Signal(signed(8), name="embed_element", reset_less=True)
        m.d.sync += element.eq(self.beat.as_value()[:8].as_signed())
        self.embed_value = requantize_pipelined(m, element, self.p_mult, self.p_shift,
                                                Const(1, 2), name="embed")
        self.embed_stored = delay(m, self.embed_pick, EMBED_LATENCY, name="embed_valid")
        self.embed_index = delay(m, self.i, EMBED_LATENCY, name="embed_index", reset_less=True)
        self.embed_last = delay(m, self.embed_pick & equals(self.i, c.hidden - 1),
                                EMBED_LATENCY, name="embed_last")

    def embed(self, op: Operator) -> None:
        m, w, param = self.m, self.w, self.param
        phase, have, lane, i = self.phase, self.have, self.lane, self.i
        with m.If(equals(phase, 0) & param.valid):  # the row's multiplier (``embed_param``)
            entry = self.param_entry(0)
            m.d.sync += [self.p_mult.eq(entry.mult), self.p_shift.eq(entry.shift),
                         *self._enter("embed_row", 1, leave="embed_param")]
        with m.If(equals(phase, 1)):
            with m.If(~have & w.valid):  # ``embed_row``: the beat taken (:meth:`feeds`)
                m.d.sync += [have.eq(1), lane.eq(0)]
            with m.Elif(have):  # an element a cycle into the requantizer, the next one down
                m.d.comb += self.embed_pick.eq(1)
                m.d.sync += [i.eq(i + 1), lane.eq(lane + 1)]  # (the beat shifted: feeds)
                with m.If(equals(lane, self.p.beat_bytes - 1)):
                    m.d.sync += have.eq(0)
                with m.If(equals(i, self.c.hidden - 1)):
                    m.d.sync += [phase.eq(2), self.flag["embed_row"].eq(0)]
        with m.If(self.embed_last):  # the element stored (:meth:`writes`)
            self.next_op(op)

    def norm(self, op: Operator) -> None:
        m, norm, phase, j = self.m, self.units.norm, self.phase, self.j
        with m.If(equals(phase, 0) & norm.cmd.ready):  # the command: ``cmd_norm``
            self._start(0)
            m.d.sync += self._enter("feed_norm", 1, leave="cmd_norm")
            if self.batch > 1:  # the gains kept from the first token, or kept now
                m.d.sync += self.gain_count.eq(0)
                with m.If(~self.first_tok):
                    self.replay.start(0, self.c.hidden // self.p.param_width)
        # rows in from the reader (``feed_norm``), ``j`` counts elements out
        with m.If(equals(phase, 1) & norm.y.valid):
            m.d.sync += j.eq(j + self.p.param_width)
            with m.If(norm.y.payload.last):
                self.next_op(op)

    def linear(self, op: Operator) -> None:
        m, sp, mvu = self.m, self.sp, self.units.mvu
        phase, i, j, lane, have = self.phase, self.i, self.j, self.lane, self.have
        lanes, vw = self.p.lanes, self.p.vector_width
        cols = getattr(self.c, op.cols)
        beats = -(-cols // lanes)
        reader = sp.reader0
        # the command (``mvu_cmd``, :meth:`feeds`)
        with m.If(equals(phase, 0) & mvu.cmd.valid & mvu.cmd.ready):
            m.d.sync += [self.flag["cmd_mvu"].eq(0), self.flag["cmd_sample"].eq(0),
                         *(self._stream(op) if op.reuse else self._enter("loading", 1))]
            if not op.reuse:
                self._start(0)
            if op.sink in (Sink.ADD, Sink.SWIGLU):  # the residual's rows, the gate's
                self._start(1)
        if not op.reuse:
            # load the vector (``loading``), ``vw`` elements (one scratchpad row) a cycle and
            # ``lanes`` a beat; ``i`` counts rows, ``lane`` the rows of the beat; rows past the
            # vector are zeros
            with m.If(equals(phase, 1)):
                with m.If(~have & (self.padding | reader.valid)):  # into the beat: feeds()
                    m.d.sync += [i.eq(i + 1), lane.eq(lane + 1)]
                    with m.If(equals(lane, lanes // vw - 1)):
                        m.d.sync += [have.eq(1), lane.eq(0)]
                with m.Elif(have & mvu.vec.ready):
                    m.d.sync += have.eq(0)
                    with m.If(i >= beats * lanes // vw):
                        if self.batch == 1:
                            m.d.sync += self._stream(op)
                        else:  # the batch's next token's vector, from its bank
                            with m.If(self.tok != self.last_tok):
                                sp.reader0.start(self.first[0], self.count[0],
                                                 bank=self.tok + 1)
                                m.d.sync += [self.tok.eq(self.tok + 1), i.eq(0),
                                             self.padding.eq(0)]
                            with m.Else():
                                m.d.sync += [self.tok.eq(0), *self._stream(op)]
        with m.If(equals(phase, 2)):  # the streams: :meth:`matvec_streams`
            self._sink(op)
            with m.If(mvu.out.valid & mvu.out.ready):
                m.d.sync += j.eq(j + self.p.rows_per_beat)
                if op.sink is not Sink.SWIGLU:
                    with m.If(mvu.out.payload.last):
                        self.next_op(op)

    def _sink(self, op: Operator) -> None:
        """Where the matrix-vector results go, one a cycle (``j`` counts them); the
        handshakes are :meth:`matvec_streams`'s."""
        m = self.m
        if op.sink is Sink.SWIGLU:  # x[k] = swiglu(g[k], up[k]), g read as up[j] leaves
            swiglu = self.units.swiglu
            # the unit's results trail its inputs by its pipeline: ``k`` counts them
            with m.If(swiglu.y.valid):
                m.d.sync += self.k.eq(self.k + self.p.rows_per_beat)
                with m.If(swiglu.y.payload.last):
                    self.next_op(op)

    def rope(self, op: Operator) -> None:  # in place, a scratchpad row a beat
        m, rope = self.m, self.units.rope
        phase, i, j = self.phase, self.i, self.j
        n = getattr(self.c, op.heads) * self.c.head_dim // self.p.vector_width
        with m.If(equals(phase, 0) & rope.cmd.ready):  # the command: ``cmd_rope``
            self._start(0)
            m.d.sync += self._enter("feed_rope", 1, leave="cmd_rope")
        with m.If(equals(phase, 1)):  # ``feed_rope``: the rows in, the results out
            m.d.comb += rope.x.payload.last.eq(equals(i, n - 1))
            with m.If(rope.x.valid & rope.x.ready):
                m.d.sync += i.eq(i + 1)
            with m.If(rope.y.valid):
                m.d.sync += j.eq(j + 1)
                with m.If(rope.y.payload.last):
                    self.next_op(op)

    def kv_write(self, op: Operator) -> None:
        # per KV head: its K rows gathered (phases 0-1), its V rows (2-3), the write (4)
        m, sp, att, reader = self.m, self.sp, self.units.att, self.sp.reader0
        i, head, phase, head_rows = self.i, self.head, self.phase, self.head_rows
        # the head's K rows from ``first`` into ``krow``, its V rows as far on as V's buffer is
        # from K's into ``row`` (:meth:`gathers`)
        for start_phase, offset in ((0, 0), (2, sp.row_of["v"] - sp.row_of["k"])):
            with m.If(equals(phase, start_phase)):
                reader.start(self.first[0] + offset, head_rows)
                m.d.sync += [*self._enter("gather", start_phase + 1), i.eq(0),
                             self.gather_k.eq(start_phase == 0)]
            # ``gather``: every row taken
            with m.If(equals(phase, start_phase + 1) & reader.valid):
                m.d.sync += i.eq(i + 1)
                with m.If(equals(i, head_rows - 1)):
                    m.d.sync += [phase.eq(start_phase + 2), self.flag["gather"].eq(0)]
                    if start_phase == 2:
                        m.d.sync += self.flag["send_kv"].eq(1)
        # the write (``send_kv``; its payload: :meth:`feeds`)
        with m.If(equals(phase, 4) & att.kv_write.ready):
            m.d.sync += [phase.eq(0), head.eq(head + 1), self.flag["send_kv"].eq(0),
                         self.first[0].eq(self.first[0] + head_rows)]
            with m.If(equals(head, self.c.kv_heads - 1)):
                self.next_op(op)

    def attention(self, op: Operator) -> None:
        # ``head`` is the job's first query head, ``lane`` counts its query beats sent; the
        # next job's command and queries go out while the unit still works on the job before
        # (its second stage), whose results are drained meanwhile (``drain_head``, ``j``)
        m, c, sp, att = self.m, self.c, self.sp, self.units.att
        phase, i, j, lane, head = self.phase, self.i, self.j, self.lane, self.head
        hp, head_rows = self.p.heads_parallel, self.head_rows
        reader = sp.reader0
        with m.If(equals(phase, 0)):  # the command (``cmd_att``, :meth:`feeds`)
            with m.If(att.cmd.ready):
                # the job's query heads are consecutive rows
                self._start(0)
                m.d.sync += [*self._enter("gather", 1, leave="cmd_att"),
                             self.flag["draining"].eq(1)]
            # a job's counters cleared while it waits (not under the unit's ready)
            m.d.sync += [i.eq(0), lane.eq(0)]
        # gather a query head into ``row``, a scratchpad row a cycle (:meth:`gathers`)
        with m.If(equals(phase, 1) & reader.valid):
            m.d.sync += i.eq(i + 1)
            with m.If(equals(i, head_rows - 1)):
                m.d.sync += self._enter("send_q", 2, leave="gather")
        with m.If(equals(phase, 2)):
            m.d.sync += i.eq(0)  # for the next head's gather (not under the unit's ready)
        with m.If(equals(phase, 2) & att.q.ready):  # ``send_q``: the query's valid
            last_head = equals(lane, hp - 1)
            m.d.sync += [lane.eq(lane + 1), phase.eq(Mux(last_head, 3, 1)),
                         self.flag["send_q"].eq(0), self.flag["gather"].eq(~last_head)]
            with m.If(last_head):  # the job's queries sent: the next job's command
                m.d.sync += [head.eq(head + hp),
                             self.first[0].eq(self.first[0] + hp * head_rows)]
                with m.If(~equals(head, c.heads - hp)):
                    m.d.sync += [phase.eq(0), self.flag["cmd_att"].eq(1)]
        # ``draining``: the results out, a job's rows counted by ``j``
        with m.If(self.flag["draining"] & att.out.valid):
            m.d.sync += j.eq(j + 1)
            with m.If(att.out.payload.last):
                m.d.sync += [j.eq(0), self.drain_head.eq(self.drain_head + hp)]
                with m.If(equals(self.drain_head, c.heads - hp)):
                    self.next_op(op)

    def silu_table(self, op: Operator) -> None:
        # ``silu`` (raised by the operator before): the table's entries in, one a cycle
        m, param, i = self.m, self.param, self.silu_index
        with m.If(param.valid):
            m.d.sync += self.i.eq(i + 1)
            with m.If(equals(i, 255)):  # the buffer's next entry is the next operator's
                m.d.sync += self.flag["silu"].eq(0)
                self.next_op(op)
