"""Matrix-vector unit: int8 x int8 dot products at ``lanes`` MACs per cycle with requantization."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.rtl.compare import equals, is_zero
from heteroreason.rtl.decoder.pipeline import (
    REQUANT_LATENCY,
    delay,
    requantize_pipelined,
    tree_latency,
    tree_sum_pipelined,
)

__all__ = ["MatVecUnit", "OutBits", "result_latency"]


class OutBits(enum.Enum, shape=2):
    """Saturation width of a result: int8 activations, int16 residual updates, int32 logits."""

    INT8 = 0
    INT16 = 1
    INT32 = 2


class MatVecUnit(wiring.Component):
    """``y[r] = sat(rshift_round((bias[r] + sum_c W[r, c] x[c]) * mult[r], shift[r]))``.

    The arithmetic of :mod:`heteroreason.model.numerics.qwen2_int8` (``requant``) for one linear
    operator; the weights arrive in the order of
    :func:`heteroreason.rtl.decoder.weight_schedule.linear_schedule`.

    A job starts with a ``cmd`` beat (rows, beats per row, output width, ``reuse``); unless
    ``reuse`` is set (keep the previous job's vector), the unit then takes ``beats`` beats of the
    input vector on ``vec`` into its buffer, and for every row one
    ``rowparam`` beat and ``beats`` weight beats, and emits one result on ``out`` per row (``last``
    on the job's final row). Weight beat ``b`` of a row meets vector beat ``b``; zero-padded
    weights make the padding of the vector irrelevant.

    With ``rows_per_beat`` k > 1 the unit computes k rows side by side: a *row* of the command,
    of ``rowparam`` and of ``out`` is a group of k consecutive rows, a weight beat carries beat
    ``b`` of each of the k rows (row ``j`` in lanes ``[j * lanes, (j + 1) * lanes)``: the order
    of :func:`~heteroreason.rtl.decoder.weight_schedule.linear_schedule` with the same
    ``rows_per_beat``), and ``rowparam`` and ``out`` carry k parameters and k results a beat.

    Parameters
    ----------
    lanes : int
        Weights of one row per beat, i.e. multiply-accumulates per row and cycle.
    max_beats : int
        Vector beats the buffer holds (``ceil(max cols / lanes)``).
    max_rows : int
        Most rows (row groups, with ``rows_per_beat`` > 1) in one job.
    rows_per_beat : int
        Rows a weight beat carries (1 by default).

    Members
    -------
    cmd : In(stream.Signature(StructLayout rows, beats, out_bits, reuse))
    vec : In(stream.Signature(ArrayLayout(signed(8), lanes)))
    weights : In(stream.Signature(ArrayLayout(signed(8), lanes * rows_per_beat)))
    rowparam : In(stream.Signature(StructLayout bias int32, mult unsigned(31), shift unsigned(6)))
        With ``rows_per_beat`` > 1, an ``ArrayLayout`` of ``rows_per_beat`` of them.
    out : Out(stream.Signature(StructLayout value int32, last))
        With ``rows_per_beat`` > 1, ``value`` is an ``ArrayLayout(signed(32), rows_per_beat)``.
    busy : Out(1)
        A job's vector or weights are being taken (its last results may still be in the
        pipeline).
    weight_wait : Out(1)
        The unit is ready for a weight beat that has not arrived (a cycle lost to the stream).

    Latency
    -------
    A row's result is on ``out`` :func:`result_latency` cycles after its last weight beat is
    taken: the buffer read, the operand registers, the registered products, the adder tree
    registered every two levels (``ceil(ceil(log2 lanes) / 2)`` stages), the accumulator, the
    requantizer's
    :data:`~heteroreason.rtl.decoder.pipeline.REQUANT_LATENCY` stages and the output queue's
    two (21 cycles at 896 lanes).

    Throughput
    ----------
    One weight beat (``lanes * rows_per_beat`` MACs) per cycle: the pipeline never stalls; a
    row's last beat waits only while the output queue (:attr:`result_buffer` results) could not
    hold its result, i.e. when ``out`` is held back. Loading the vector costs ``beats`` cycles
    per job; a job's command is taken while the previous job's results still drain.
    """

    def __init__(self, *, lanes, max_beats, max_rows, rows_per_beat=1):
        for name, value in (("lanes", lanes), ("max_beats", max_beats), ("max_rows", max_rows),
                            ("rows_per_beat", rows_per_beat)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise TypeError(f"{name} must be a positive integer, not {value!r}")
        self._lanes = lanes
        self._max_beats = max_beats
        self._max_rows = max_rows
        self._rows_per_beat = k = rows_per_beat
        vector = data.ArrayLayout(signed(8), lanes)
        param = data.StructLayout({"bias": signed(32), "mult": unsigned(31), "shift": unsigned(6)})
        super().__init__({
            "cmd": In(stream.Signature(data.StructLayout({
                "rows": range(max_rows + 1), "beats": range(max_beats + 1),
                "out_bits": OutBits, "reuse": 1}))),
            "vec": In(stream.Signature(vector)),
            "weights": In(stream.Signature(vector if k == 1
                                           else data.ArrayLayout(signed(8), lanes * k))),
            "rowparam": In(stream.Signature(param if k == 1 else data.ArrayLayout(param, k))),
            "out": Out(stream.Signature(data.StructLayout({
                "value": signed(32) if k == 1 else data.ArrayLayout(signed(32), k),
                "last": 1}))),
            "busy": Out(1),
            "weight_wait": Out(1),
        })

    @property
    def lanes(self):
        return self._lanes

    @property
    def max_beats(self):
        return self._max_beats

    @property
    def max_rows(self):
        return self._max_rows

    @property
    def rows_per_beat(self):
        return self._rows_per_beat

    @property
    def result_latency(self) -> int:
        """Cycles from taking a row's last weight beat to its result on ``out``."""
        return result_latency(self.lanes)

    @property
    def result_buffer(self) -> int:
        """Results the output queue holds: enough for one a cycle with ``out`` always ready."""
        return result_latency(self.lanes) + 2

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        vector = data.ArrayLayout(signed(8), lanes)
        m.submodules.buffer = buffer = memory.Memory(shape=vector, depth=self.max_beats, init=[])
        write = buffer.write_port()
        read = buffer.read_port()  # synchronous: block RAM or registered LUT RAM

        rows = Signal(range(self.max_rows + 1))
        beats = Signal(range(self.max_beats + 1))
        out_bits = Signal(OutBits)
        beat = Signal(range(self.max_beats + 1))
        row = Signal(range(self.max_rows + 1))
        param = Signal(self.rowparam.payload.shape())
        have_param = Signal()
        # registered flags of the beat and row being taken (no comparison on the take path)
        beats_m1 = Signal(range(self.max_beats + 1))
        one_beat = Signal()
        last_beat = Signal()
        final_row = Signal()

        # results in flight (taken final beats whose results have not left ``out``): a row's
        # final beat is taken only while the queue will have room for its result
        k = self.rows_per_beat
        depth = self.result_buffer
        m.submodules.results = results = fifo.SyncFIFOBuffered(width=32 * k + 1, depth=depth)
        in_flight = Signal(range(depth + 1))
        take_last = Signal()
        leave = Signal()
        m.d.comb += [
            leave.eq(results.r_rdy & results.r_en),
            self.out.valid.eq(results.r_rdy),
            self.out.payload.value.eq(results.r_data[:32 * k]),
            self.out.payload.last.eq(results.r_data[32 * k]),
            results.r_en.eq(self.out.ready),
        ]
        # ``room``: the queue will hold one more result (registered: no comparison on the take
        # path), i.e. ``in_flight < depth`` of this cycle. Next cycle's value is chosen by the
        # take and the leave among flags of this cycle's count (no adder after the take)
        room = Signal(init=1)
        next_in_flight = Signal(range(depth + 2))
        below = (in_flight < depth - 1) if depth > 1 else Const(0)
        at_edge, full = equals(in_flight, depth - 1), equals(in_flight, depth)
        m.d.comb += next_in_flight.eq(in_flight + take_last - leave)
        m.d.sync += [in_flight.eq(next_in_flight),
                     room.eq(below | (at_edge & (~take_last | leave))
                             | (full & leave & ~take_last))]

        # stage 0: the taken weight beat, its vector beat read from the buffer, its row's tags
        take = Signal()
        s0 = Signal(data.StructLayout({
            "valid": 1, "first": 1, "last": 1, "final": 1, "bits": OutBits,
            "param": self.rowparam.payload.shape()}))
        s0_w = Signal(self.weights.payload.shape(), reset_less=True)
        m.d.comb += [read.addr.eq(beat), read.en.eq(1)]
        m.d.sync += s0.valid.eq(take)
        # a row's parameters are taken with (or before) its first weight beat. The beat, its
        # tags and the parameters are captured every cycle, in every state (no wide enable or
        # state mux between the prefetch buffers' block RAM outputs and these registers);
        # s0.valid says whether they were taken, and ``param`` follows the stream's payload
        # until a row's parameters are held
        cur_param = Mux(have_param, param.as_value(), self.rowparam.payload.as_value())
        m.d.sync += [
            s0.first.eq(is_zero(beat)), s0.last.eq(last_beat),
            s0.final.eq(final_row), s0.bits.eq(out_bits), s0.param.eq(cur_param),
            s0_w.eq(self.weights.payload),
        ]
        with m.If(~have_param):
            m.d.sync += param.eq(self.rowparam.payload)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                # the command's fields are captured every idle cycle (the cycle it is taken
                # is the last) and the counters cleared: only the state waits on cmd.valid
                m.d.sync += [
                    rows.eq(self.cmd.payload.rows), beats.eq(self.cmd.payload.beats),
                    out_bits.eq(self.cmd.payload.out_bits), beat.eq(0), row.eq(0),
                    beats_m1.eq(self.cmd.payload.beats - 1),
                    one_beat.eq(self.cmd.payload.beats == 1),
                    last_beat.eq(self.cmd.payload.beats == 1),
                    final_row.eq(self.cmd.payload.rows == 1), have_param.eq(0),
                ]
                with m.If(self.cmd.valid & ~is_zero(self.cmd.payload.rows)
                          & ~is_zero(self.cmd.payload.beats)):
                    with m.If(self.cmd.payload.reuse):
                        m.next = "RUN"
                    with m.Else():
                        m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += [
                    self.busy.eq(1), self.vec.ready.eq(1),
                    write.addr.eq(beat), write.data.eq(self.vec.payload),
                    write.en.eq(self.vec.valid),
                ]
                with m.If(self.vec.valid):
                    with m.If(beat == beats - 1):
                        m.d.sync += [beat.eq(0), have_param.eq(0)]
                        m.next = "RUN"
                    with m.Else():
                        m.d.sync += beat.eq(beat + 1)
            with m.State("RUN"):
                can_take = (have_param | self.rowparam.valid) & (~last_beat | room)
                m.d.comb += [
                    self.busy.eq(1),
                    self.rowparam.ready.eq(~have_param),
                    self.weights.ready.eq(can_take),
                    self.weight_wait.eq(can_take & ~self.weights.valid),
                    take.eq(self.weights.valid & can_take),
                    take_last.eq(take & last_beat),
                ]
                with m.If(take):
                    with m.If(last_beat):
                        m.d.sync += [beat.eq(0), have_param.eq(0), row.eq(row + 1),
                                     last_beat.eq(one_beat), final_row.eq(row + 2 == rows)]
                        with m.If(final_row):
                            m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [beat.eq(beat + 1), have_param.eq(1),
                                     last_beat.eq(beat + 1 == beats_m1)]
                with m.Elif(self.rowparam.valid & ~have_param):
                    m.d.sync += have_param.eq(1)

        # stage 1: the operands registered beside each multiplier (its A and B registers: the
        # beat's register and the buffer's output are far from most lanes); 2: the products
        # (DSP48E2 multipliers with their M register); then the tree
        w_a = delay(m, s0_w, 1, name="w_a", reset_less=True)
        x_a = delay(m, read.data, 1, name="x_a", reset_less=True)
        # row j of a group: its products, its sum and its requantizer (the names of one row
        # without a suffix)
        suffix = [""] if k == 1 else [f"_{j}" for j in range(k)]
        dots = []
        for j in range(k):
            products = []
            for i in range(lanes):
                product = Signal(signed(16), name=f"product{suffix[j]}{i}", reset_less=True)
                m.d.sync += product.eq(w_a[j * lanes + i] * x_a[i])
                products.append(product)
            # the products leave the multiplier blocks (far from the fabric's adders): one
            # adder level, then a register
            dots.append(tree_sum_pipelined(m, products, name=f"dot{suffix[j]}",
                                           first_stage_levels=1))
        tags = delay(m, s0, 2 + tree_latency(lanes, first_stage_levels=1), name="tags")
        tags = data.View(s0.shape(), tags)

        def row_param(j):
            return tags.param if k == 1 else tags.param[j]

        def row_field(view, j):
            return view if k == 1 else view[j]

        # accumulate; a row's final beat hands its sum to the requantizer
        accs, totals = [], []
        for j in range(k):
            acc = Signal(signed(48), name=f"acc{suffix[j]}")
            total = Signal(signed(48), name=f"total{suffix[j]}")
            m.d.comb += total.eq(Mux(tags.first, row_param(j).bias, acc) + dots[j])
            accs.append(acc)
            totals.append(total)
        sum_valid = Signal()
        row_sums = [Signal(signed(48), name=f"row_sum{suffix[j]}", reset_less=True)
                    for j in range(k)]
        sum_tags = Signal(data.StructLayout({
            "final": 1, "bits": OutBits,
            "mult": unsigned(31) if k == 1 else data.ArrayLayout(unsigned(31), k),
            "shift": unsigned(6) if k == 1 else data.ArrayLayout(unsigned(6), k)}))
        m.d.sync += sum_valid.eq(tags.valid & tags.last)
        with m.If(tags.valid):
            m.d.sync += [acc.eq(total) for acc, total in zip(accs, totals, strict=True)]
            with m.If(tags.last):
                m.d.sync += [row_sum.eq(total) for row_sum, total in zip(row_sums, totals,
                                                                         strict=True)]
                m.d.sync += [sum_tags.final.eq(tags.final), sum_tags.bits.eq(tags.bits)]
                m.d.sync += [row_field(sum_tags.mult, j).eq(row_param(j).mult)
                             for j in range(k)]
                m.d.sync += [row_field(sum_tags.shift, j).eq(row_param(j).shift)
                             for j in range(k)]
        values = [requantize_pipelined(m, row_sums[j], row_field(sum_tags.mult, j),
                                       row_field(sum_tags.shift, j), sum_tags.bits.as_value(),
                                       name=f"rq{suffix[j]}") for j in range(k)]
        done = delay(m, Cat(sum_valid, sum_tags.final), REQUANT_LATENCY, name="done")
        m.d.comb += [results.w_en.eq(done[0]), results.w_data.eq(Cat(*values, done[1]))]
        return m


def result_latency(lanes: int) -> int:
    """Cycles from taking a row's last weight beat to its result on ``out`` of a
    :class:`MatVecUnit` of ``lanes`` lanes: the buffer read, the multipliers' operand registers,
    the products, the registered adder tree, the accumulator, the requantizer and the output
    queue's two."""
    return 1 + 1 + 1 + tree_latency(lanes, first_stage_levels=1) + 1 + REQUANT_LATENCY + 2
