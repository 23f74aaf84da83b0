"""The stages of :class:`~heteroreason.rtl.decoder.mvu.MatVecUnit`'s elaboration, in the order
it elaborates them (the output queue, stage 0, the control, the products and their trees, the
accumulators and requantizers). Each stage takes the module and ``st``, the signals the stages
share, reads what it needs of them and adds what later stages read."""

from amaranth.hdl import Cat, Const, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, fifo

from heteroreason.rtl.compare import equals, is_zero
from heteroreason.rtl.decoder.pipeline import (
    REQUANT_LATENCY,
    delay,
    requantize_pipelined,
    tree_latency,
    tree_sum_pipelined,
)

__all__ = ["PACKED_LOW_BITS", "MatVecStages", "OutBits", "packs", "result_latency"]

# two int8 x int8 products in one multiplier sharing an operand (two vectors and a weight, or,
# with one vector, two rows' weights and the vector's element): the second product in the low
# bits of ``w * (x0 * 2**PACKED_LOW_BITS + x1)`` (AMD WP486's packing on a DSP48E2)
PACKED_LOW_BITS = 18


class OutBits(enum.Enum, shape=2):
    """Saturation width of a result: int8 activations, int16 residual updates, int32 logits."""

    INT8 = 0
    INT16 = 1
    INT32 = 2


def packs(vectors: int, rows_per_beat: int) -> bool:
    """Whether a :class:`MatVecUnit` puts two products in a multiplier: two vectors sharing a
    weight (``vectors`` > 1), or two rows' weights sharing the vector's element (one vector,
    ``rows_per_beat`` > 1)."""
    return vectors > 1 or rows_per_beat > 1


def _product_latency(vectors: int, rows_per_beat: int = 1) -> int:
    """Registers from a taken weight beat's stage to its products: the operands' and the
    products' (packed: also the packed operand's and the split products')."""
    return 4 if packs(vectors, rows_per_beat) else 2


def result_latency(lanes: int, *, vectors: int = 1, rows_per_beat: int = 1) -> int:
    """Cycles from taking a row's last weight beat to its result on ``out`` of a
    :class:`MatVecUnit` of ``lanes`` lanes, ``vectors`` vectors and ``rows_per_beat`` rows a
    beat: the buffer read, the multipliers' operand registers, (packed, :func:`packs`: the
    packed operand's register,) the products, (the split products,) the registered adder tree,
    the accumulator, the requantizer and the output queue's two."""
    return (1 + _product_latency(vectors, rows_per_beat)
            + tree_latency(lanes, first_stage_levels=1) + 1 + REQUANT_LATENCY + 2)


class MatVecStages:
    """The elaboration's stages of :class:`~heteroreason.rtl.decoder.mvu.MatVecUnit` (which
    holds the ports and parameters they read)."""

    def _result_queue(self, m, st):
        """The output queue and its room: a row's final beat is taken only while the queue will
        hold its result."""
        n = st.n
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
        vars(st).update(k=k, results=results, take_last=take_last, room=room)

    def _stage0(self, m, st):
        """Stage 0: the taken weight beat, its vector beat read from the buffer, its row's
        tags."""
        out_bits, beat, param, have_param = st.out_bits, st.beat, st.param, st.have_param
        last_beat, final_row, n, reads = st.last_beat, st.final_row, st.n, st.reads
        # stage 0: the taken weight beat, its vector beat read from the buffer, its row's tags
        take = Signal()
        # the tags' data without a reset (``s0_valid``, with one, says when they were taken)
        s0 = Signal(data.StructLayout({
            "valid": 1, "first": 1, "last": 1, "final": 1, "bits": OutBits,
            "param": self.rowparam.payload.shape()}), reset_less=True)
        s0_valid = Signal(name="s0_valid")
        s0_w = Signal(self.weights.payload.shape(), reset_less=True)
        for v, columns in enumerate(reads):  # each column's address its copy of the beat
            for c, port in enumerate(columns):
                m.d.comb += [port.addr.eq(beat.copy(v * len(columns) + c)), port.en.eq(1)]
        # with vectors > 1: the vector being loaded, and how many the job loads
        loading = Signal(range(n), name="loading") if n > 1 else None
        job_vectors = Signal(range(n + 1), name="job_vectors") if n > 1 else None
        m.d.sync += [s0.valid.eq(take), s0_valid.eq(take)]
        # a row's parameters are taken with (or before) its first weight beat. The beat, its
        # tags and the parameters are captured every cycle, in every state (no wide enable or
        # state mux between the prefetch buffers' block RAM outputs and these registers);
        # s0.valid says whether they were taken, and ``param`` follows the stream's payload
        # until a row's parameters are held
        cur_param = Mux(have_param, param.as_value(), self.rowparam.payload.as_value())
        m.d.sync += [
            s0.first.eq(is_zero(beat.value)), s0.last.eq(last_beat),
            s0.final.eq(final_row), s0.bits.eq(out_bits), s0.param.eq(cur_param),
            s0_w.eq(self.weights.payload),
        ]
        with m.If(~have_param):
            m.d.sync += param.eq(self.rowparam.payload)
        vars(st).update(take=take, s0=s0, s0_valid=s0_valid, s0_w=s0_w, loading=loading,
                        job_vectors=job_vectors)

    def _control(self, m, st):
        """The command, the vector's load and the weight beats taken (the state machine).

        Long because: the buffers' columns are written outside the state machine, and its three
        states read best together, each a few lines."""
        rows, beats, out_bits, beat, row = st.rows, st.beats, st.out_bits, st.beat, st.row
        have_param, beats_m1, one_beat = st.have_param, st.beats_m1, st.one_beat
        last_beat, final_row, n, writes = st.last_beat, st.final_row, st.n, st.writes
        take_last, room, take, loading = st.take_last, st.room, st.take, st.loading
        job_vectors, load_write = st.job_vectors, st.load_write
        # the buffers' write address and data whatever the state (assigned in LOAD, a comb
        # assignment would be zero outside it: the state gating each of the beat's bits); a
        # column's address is its copy of the beat, its data its lanes of the beat
        payload, bits = self.vec.payload.as_value(), st.group * 8
        for v, columns in enumerate(writes):
            for c, port in enumerate(columns):
                m.d.comb += [port.addr.eq(beat.copy(v * len(columns) + c)),
                             port.data.eq(payload[c * bits:(c + 1) * bits])]
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                # the command's fields are captured every idle cycle (the cycle it is taken
                # is the last) and the counters cleared: only the state waits on cmd.valid
                m.d.sync += [
                    rows.eq(self.cmd.payload.rows), beats.eq(self.cmd.payload.beats),
                    out_bits.eq(self.cmd.payload.out_bits), *beat.eq(0), row.eq(0),
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
                m.d.sync += load_write.eq(Mux(job & ~self.cmd.payload.reuse, 1, 0))
                with m.If(job):
                    with m.If(self.cmd.payload.reuse):
                        m.next = "RUN"
                    with m.Else():
                        m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += [self.busy.eq(1), self.vec.ready.eq(1)]
                # a group's enable: the beat's valid and its own copy of the load flag (the
                # address and data are the write port's in every state: see below the FSM)
                for v, columns in enumerate(writes):
                    m.d.comb += [port.en.eq(self.vec.valid & load_write.copy(c)[v])
                                 for c, port in enumerate(columns)]
                with m.If(self.vec.valid):
                    with m.If(beat.value == beats - 1):
                        m.d.sync += beat.eq(0)
                        if n == 1:
                            m.d.sync += [have_param.eq(0), *load_write.eq(0)]
                            m.next = "RUN"
                        else:
                            with m.If(loading == job_vectors - 1):
                                m.d.sync += [have_param.eq(0), *load_write.eq(0)]
                                m.next = "RUN"
                            with m.Else():
                                m.d.sync += [loading.eq(loading + 1),
                                             *load_write.eq(load_write.value << 1)]
                    with m.Else():
                        m.d.sync += beat.eq(beat.value + 1)
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
                        m.d.sync += [*beat.eq(0), have_param.eq(0), row.eq(row + 1),
                                     last_beat.eq(one_beat), final_row.eq(row + 2 == rows)]
                        with m.If(final_row):
                            m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [*beat.eq(beat.value + 1), have_param.eq(1),
                                     last_beat.eq(beat.value + 1 == beats_m1)]
                with m.Elif(self.rowparam.valid & ~have_param):
                    m.d.sync += have_param.eq(1)

    def _products(self, m, st):
        """The products and their adder trees (stages 1 and on)."""
        lanes, n, reads, k, s0, s0_w = st.lanes, st.n, st.read_data, st.k, st.s0, st.s0_w
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

        if n == 1 and k == 1:
            x_a = delay(m, reads[0], 1, name="x_a", reset_less=True)
            products = []
            for i in range(lanes):
                product = Signal(signed(16), name=f"product{i}", reset_less=True)
                m.d.sync += product.eq(w_a[i] * x_a[i])
                products.append(product)
            dots = {(0, 0): dot((0, 0), products)}
        elif n == 1:
            products = self._row_packed_products(
                m, w_a, delay(m, reads[0], 1, name="x_a", reset_less=True), suffix)
            dots = {slot: dot(slot, products[slot]) for slot in slots}
        else:
            products = self._packed_products(m, w_a, [
                delay(m, read, 1, name=f"x_a{v}", reset_less=True)
                for v, read in enumerate(reads)], suffix)
            dots = {slot: dot(slot, products[slot]) for slot in slots}
        # the tags' data without a reset, their valid bit with one
        tag_latency = _product_latency(n, k) + tree_latency(lanes, first_stage_levels=1)
        tags = data.View(s0.shape(), delay(m, s0, tag_latency, name="tags", reset_less=True))
        tags_valid = delay(m, st.s0_valid, tag_latency, name="tags_valid")

        def row_param(j):
            return tags.param if k == 1 else tags.param[j]

        def row_field(view, j):
            return view if k == 1 else view[j]
        vars(st).update(row_param=row_param, row_field=row_field, slots=slots, suffix=suffix)
        vars(st).update(tags=tags, tags_valid=tags_valid, dots=dots)

    def _accumulate(self, m, st):
        """The rows' sums accumulated and requantized into the output queue."""
        k, results, row_param, row_field = st.k, st.results, st.row_param, st.row_field
        slots, suffix, tags, dots = st.slots, st.suffix, st.tags, st.dots
        tags_valid = st.tags_valid
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
            "shift": unsigned(6) if k == 1 else data.ArrayLayout(unsigned(6), k)}),
            reset_less=True)  # ``sum_valid`` says when they hold a row's
        m.d.sync += sum_valid.eq(tags_valid & tags.last)
        with m.If(tags_valid):
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

    def _row_packed_products(self, m, w_a, x_a, suffix):
        """With one vector, the products of the weight beat ``w_a``'s rows with the vector beat
        ``x_a``, two rows a multiplier sharing the vector's element (rows ``2q`` and ``2q + 1``
        packed as ``w[2q] * 2**low + w[2q + 1]``, :data:`PACKED_LOW_BITS`):
        ``{(0, j): [w[j, i] * x[i] for each lane i]}``, two registers later than ``w_a`` and
        ``x_a``."""
        lanes, k, low = self.lanes, self.rows_per_beat, PACKED_LOW_BITS
        x_m = delay(m, x_a, 1, name="x_ad", reset_less=True)
        products = {(0, j): [] for j in range(k)}
        for q in range(k // 2):
            for i in range(lanes):
                high_w, low_w = w_a[2 * q * lanes + i], w_a[(2 * q + 1) * lanes + i]
                # the pre-adder's sum, high_w * 2**low + low_w (27 bits)
                operand = Signal(signed(8 + low + 1), name=f"wpacked{q}_{i}", reset_less=True)
                m.d.sync += operand.eq((high_w << low) + low_w)
                both = Signal(signed(8 + 8 + low + 1), name=f"wpacked_product{q}_{i}",
                              reset_less=True)
                m.d.sync += both.eq(operand * x_m[i])
                high, low_part = (Signal(signed(16), name=f"product{suffix[0, j]}{i}",
                                         reset_less=True) for j in (2 * q, 2 * q + 1))
                # the low product's sign borrowed one from the high one: give it back
                m.d.sync += [high.eq((both >> low) + both[low - 1]),
                             low_part.eq(both[:low].as_signed())]
                products[0, 2 * q].append(high)
                products[0, 2 * q + 1].append(low_part)
        if k % 2:  # the odd row alone, its product as late as the split ones
            w_m = delay(m, w_a, 1, name="w_ad", reset_less=True)
            for i in range(lanes):
                single = Signal(signed(16), name=f"single_product{suffix[0, k - 1]}{i}",
                                reset_less=True)
                m.d.sync += single.eq(w_m[(k - 1) * lanes + i] * x_m[i])
                products[0, k - 1].append(delay(m, single, 1,
                                                name=f"product{suffix[0, k - 1]}{i}_d",
                                                reset_less=True))
        return products
