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

__all__ = ["PACKED_LOW_BITS", "MatVecUnit", "OutBits", "result_latency"]

# two int8 x int8 products in one multiplier (vectors side by side, the weight shared): the
# second vector's product in the low bits of ``w * (x0 * 2**PACKED_LOW_BITS + x1)``
PACKED_LOW_BITS = 18


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

    With ``vectors`` B > 1 every weight beat meets B vectors (a batch of tokens on one pass of
    the weights): the command says how many (``vectors``, 1 to B) the job loads, ``vec`` takes
    them one after the other (vector 0's ``beats`` beats, then vector 1's, ...), and ``out``
    carries B x k results a row group, vector-major (vector ``v``'s k results at ``[v * k,
    (v + 1) * k)``); the results of vectors the job did not load are those of the buffer's
    stale contents. The vectors share each weight: vectors ``2p`` and ``2p + 1`` go through one
    multiplier, ``w * (x[2p] * 2**18 + x[2p + 1])``, whose low 18 bits hold ``w * x[2p + 1]``
    and whose high bits, corrected by the low part's sign, ``w * x[2p]`` (the packing of AMD's
    WP486 on a DSP48E2's pre-adder and 27 x 18 multiplier): ``ceil(B / 2)`` multipliers a
    weight.

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
    vectors : int
        Vectors each weight beat meets (1 by default).

    Members
    -------
    cmd : In(stream.Signature(StructLayout rows, beats, out_bits, reuse))
        With ``vectors`` > 1, also ``vectors``: how many the job loads, 1 to ``vectors`` (a
        job that loads is ignored at 0, like one of no rows or beats; more than the unit has
        is not allowed: it would wait for vectors it has no buffer for).
    vec : In(stream.Signature(ArrayLayout(signed(8), lanes)))
    weights : In(stream.Signature(ArrayLayout(signed(8), lanes * rows_per_beat)))
    rowparam : In(stream.Signature(StructLayout bias int32, mult unsigned(31), shift unsigned(6)))
        With ``rows_per_beat`` > 1, an ``ArrayLayout`` of ``rows_per_beat`` of them.
    out : Out(stream.Signature(StructLayout value int32, last))
        With ``rows_per_beat`` > 1 or ``vectors`` > 1, ``value`` is an
        ``ArrayLayout(signed(32), vectors * rows_per_beat)``, vector-major.
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
    two (21 cycles at 896 lanes); with ``vectors`` > 1, two more: the packed operand's register
    (the pre-adder's) and the split products'.

    Throughput
    ----------
    One weight beat (``lanes * rows_per_beat * vectors`` MACs) per cycle: the pipeline never
    stalls; a row's last beat waits only while the output queue (:attr:`result_buffer` results)
    could not hold its result, i.e. when ``out`` is held back. Loading the vectors costs
    ``beats`` cycles per vector and job; a job's command is taken while the previous job's
    results still drain.
    """

    def __init__(self, *, lanes, max_beats, max_rows, rows_per_beat=1, vectors=1):
        for name, value in (("lanes", lanes), ("max_beats", max_beats), ("max_rows", max_rows),
                            ("rows_per_beat", rows_per_beat), ("vectors", vectors)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise TypeError(f"{name} must be a positive integer, not {value!r}")
        self._lanes = lanes
        self._max_beats = max_beats
        self._max_rows = max_rows
        self._rows_per_beat = k = rows_per_beat
        self._vectors = vectors
        vector = data.ArrayLayout(signed(8), lanes)
        param = data.StructLayout({"bias": signed(32), "mult": unsigned(31), "shift": unsigned(6)})
        command = {"rows": range(max_rows + 1), "beats": range(max_beats + 1),
                   "out_bits": OutBits, "reuse": 1}
        if vectors > 1:
            command["vectors"] = range(vectors + 1)
        results = k * vectors
        super().__init__({
            "cmd": In(stream.Signature(data.StructLayout(command))),
            "vec": In(stream.Signature(vector)),
            "weights": In(stream.Signature(vector if k == 1
                                           else data.ArrayLayout(signed(8), lanes * k))),
            "rowparam": In(stream.Signature(param if k == 1 else data.ArrayLayout(param, k))),
            "out": Out(stream.Signature(data.StructLayout({
                "value": signed(32) if results == 1 else data.ArrayLayout(signed(32), results),
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
    def vectors(self):
        return self._vectors

    @property
    def result_latency(self) -> int:
        """Cycles from taking a row's last weight beat to its result on ``out``."""
        return result_latency(self.lanes, vectors=self.vectors)

    @property
    def result_buffer(self) -> int:
        """Results the output queue holds: enough for one a cycle with ``out`` always ready."""
        return self.result_latency + 2

    def elaborate(self, platform):
        m = Module()
        lanes, n = self.lanes, self.vectors
        vector = data.ArrayLayout(signed(8), lanes)
        if n == 1:
            m.submodules.buffer = buffer = memory.Memory(shape=vector, depth=self.max_beats,
                                                         init=[])
            write = buffer.write_port()
            read = buffer.read_port()  # synchronous: block RAM or registered LUT RAM
            writes, reads = [write], [read]
        else:  # a buffer a vector, read side by side
            writes, reads = [], []
            for v in range(n):
                m.submodules[f"buffer{v}"] = buffer = memory.Memory(
                    shape=vector, depth=self.max_beats, init=[])
                writes.append(buffer.write_port())
                reads.append(buffer.read_port())

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
        width = 32 * k * n
        depth = self.result_buffer
        m.submodules.results = results = fifo.SyncFIFOBuffered(width=width + 1, depth=depth)
        in_flight = Signal(range(depth + 1))
        take_last = Signal()
        leave = Signal()
        m.d.comb += [
            leave.eq(results.r_rdy & results.r_en),
            self.out.valid.eq(results.r_rdy),
            self.out.payload.value.eq(results.r_data[:width]),
            self.out.payload.last.eq(results.r_data[width]),
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
        for port in reads:
            m.d.comb += [port.addr.eq(beat), port.en.eq(1)]
        # with vectors > 1: the vector being loaded, and how many the job loads
        loading = Signal(range(n), name="loading") if n > 1 else None
        job_vectors = Signal(range(n + 1), name="job_vectors") if n > 1 else None
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
                job = self.cmd.valid & ~is_zero(self.cmd.payload.rows) \
                    & ~is_zero(self.cmd.payload.beats)
                if n > 1:
                    m.d.sync += [loading.eq(0), job_vectors.eq(self.cmd.payload.vectors)]
                    job = job & (self.cmd.payload.reuse | ~is_zero(self.cmd.payload.vectors))
                with m.If(job):
                    with m.If(self.cmd.payload.reuse):
                        m.next = "RUN"
                    with m.Else():
                        m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += [self.busy.eq(1), self.vec.ready.eq(1)]
                if n == 1:
                    m.d.comb += [write.addr.eq(beat), write.data.eq(self.vec.payload),
                                 write.en.eq(self.vec.valid)]
                else:
                    for v, port in enumerate(writes):
                        m.d.comb += [port.addr.eq(beat), port.data.eq(self.vec.payload),
                                     port.en.eq(self.vec.valid & (loading == v))]
                with m.If(self.vec.valid):
                    with m.If(beat == beats - 1):
                        m.d.sync += beat.eq(0)
                        if n == 1:
                            m.d.sync += have_param.eq(0)
                            m.next = "RUN"
                        else:
                            with m.If(loading == job_vectors - 1):
                                m.d.sync += have_param.eq(0)
                                m.next = "RUN"
                            with m.Else():
                                m.d.sync += loading.eq(loading + 1)
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
        # (DSP48E2 multipliers with their M register); then the tree. With vectors > 1, a
        # vector pair's operand (the pre-adder's register) and the split products come between
        w_a = delay(m, s0_w, 1, name="w_a", reset_less=True)
        # the products of vector v, row j of a group (the names of one row and vector without
        # a suffix)
        slots = [(v, j) for v in range(n) for j in range(k)]
        suffix = {(v, j): (f"_{v}" if n > 1 else "") + (f"_{j}" if k > 1 else "")
                  for v, j in slots}
        # the products leave the multiplier blocks (far from the fabric's adders): one adder
        # level, then a register
        def dot(slot, products):
            return tree_sum_pipelined(m, products, name=f"dot{suffix[slot]}",
                                      first_stage_levels=1)

        if n == 1:
            x_a = delay(m, read.data, 1, name="x_a", reset_less=True)
            dots = {}
            for j in range(k):
                products = []
                for i in range(lanes):
                    product = Signal(signed(16), name=f"product{suffix[0, j]}{i}",
                                     reset_less=True)
                    m.d.sync += product.eq(w_a[j * lanes + i] * x_a[i])
                    products.append(product)
                dots[0, j] = dot((0, j), products)
        else:
            products = self._packed_products(m, w_a, [
                delay(m, port.data, 1, name=f"x_a{v}", reset_less=True)
                for v, port in enumerate(reads)], suffix)
            dots = {slot: dot(slot, products[slot]) for slot in slots}
        tags = delay(m, s0, _product_latency(n) + tree_latency(lanes, first_stage_levels=1),
                     name="tags")
        tags = data.View(s0.shape(), tags)

        def row_param(j):
            return tags.param if k == 1 else tags.param[j]

        def row_field(view, j):
            return view if k == 1 else view[j]

        # accumulate; a row's final beat hands its sum to the requantizer
        accs, totals = [], []
        for v, j in slots:
            acc = Signal(signed(48), name=f"acc{suffix[v, j]}")
            total = Signal(signed(48), name=f"total{suffix[v, j]}")
            m.d.comb += total.eq(Mux(tags.first, row_param(j).bias, acc) + dots[v, j])
            accs.append(acc)
            totals.append(total)
        sum_valid = Signal()
        row_sums = [Signal(signed(48), name=f"row_sum{suffix[slot]}", reset_less=True)
                    for slot in slots]
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
        values = [requantize_pipelined(m, row_sum, row_field(sum_tags.mult, j),
                                       row_field(sum_tags.shift, j), sum_tags.bits.as_value(),
                                       name=f"rq{suffix[v, j]}")
                  for row_sum, (v, j) in zip(row_sums, slots, strict=True)]
        done = delay(m, Cat(sum_valid, sum_tags.final), REQUANT_LATENCY, name="done")
        m.d.comb += [results.w_en.eq(done[0]), results.w_data.eq(Cat(*values, done[1]))]
        return m

    def _packed_products(self, m, w_a, x_a, suffix):
        """The products of every vector with the weight beat ``w_a``, two vectors a multiplier
        (:data:`PACKED_LOW_BITS`): ``{(v, j): [w[j, i] * x_v[i] for each lane i]}``, two
        registers later than the registered operands ``w_a`` and ``x_a`` (one per vector)."""
        lanes, n, k, low = self.lanes, self.vectors, self.rows_per_beat, PACKED_LOW_BITS
        w_m = delay(m, w_a, 1, name="w_ad", reset_less=True)
        # a vector pair's operand, x[2p] * 2**low + x[2p + 1] (the pre-adder's sum, 27 bits)
        packed = []
        for p in range(n // 2):
            operands = []
            for i in range(lanes):
                operand = Signal(signed(8 + low + 1), name=f"packed{p}_{i}", reset_less=True)
                m.d.sync += operand.eq((x_a[2 * p][i] << low) + x_a[2 * p + 1][i])
                operands.append(operand)
            packed.append(operands)
        odd = delay(m, x_a[n - 1], 1, name="x_ad", reset_less=True) if n % 2 else None
        products = {(v, j): [] for v in range(n) for j in range(k)}
        for j in range(k):
            for i in range(lanes):
                w = w_m[j * lanes + i]
                for p, operands in enumerate(packed):
                    both = Signal(signed(8 + 8 + low + 1), name=f"packed_product{p}_{j}_{i}",
                                  reset_less=True)
                    m.d.sync += both.eq(w * operands[i])
                    high, low_part = (Signal(signed(16), name=f"product{suffix[v, j]}{i}",
                                             reset_less=True) for v in (2 * p, 2 * p + 1))
                    # the low product's sign borrowed one from the high one: give it back
                    m.d.sync += [high.eq((both >> low) + both[low - 1]),
                                 low_part.eq(both[:low].as_signed())]
                    products[2 * p, j].append(high)
                    products[2 * p + 1, j].append(low_part)
                if odd is not None:
                    single = Signal(signed(16), name=f"single_product{suffix[n - 1, j]}{i}",
                                    reset_less=True)
                    m.d.sync += single.eq(w * odd[i])
                    products[n - 1, j].append(delay(m, single, 1,
                                                    name=f"product{suffix[n - 1, j]}{i}_d",
                                                    reset_less=True))
        return products


def _product_latency(vectors: int) -> int:
    """Registers from a taken weight beat's stage to its products: the operands' and the
    products' (with vectors > 1 also the packed operand's and the split products')."""
    return 2 if vectors == 1 else 4


def result_latency(lanes: int, *, vectors: int = 1) -> int:
    """Cycles from taking a row's last weight beat to its result on ``out`` of a
    :class:`MatVecUnit` of ``lanes`` lanes and ``vectors`` vectors: the buffer read, the
    multipliers' operand registers, (with vectors > 1, the packed operand's register,) the
    products, (the split products,) the registered adder tree, the accumulator, the
    requantizer and the output queue's two."""
    return (1 + _product_latency(vectors) + tree_latency(lanes, first_stage_levels=1)
            + 1 + REQUANT_LATENCY + 2)
