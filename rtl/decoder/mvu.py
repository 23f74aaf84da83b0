"""Matrix-vector unit: int8 x int8 dot products at ``lanes`` MACs per cycle with requantization."""

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.rtl.compare import is_zero
from heteroreason.rtl.decoder.arith import round_shift, tree_sum

__all__ = ["MatVecUnit", "OutBits"]


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

    Parameters
    ----------
    lanes : int
        Weights per beat, i.e. multiply-accumulates per cycle.
    max_beats : int
        Vector beats the buffer holds (``ceil(max cols / lanes)``).
    max_rows : int
        Most rows in one job.

    Members
    -------
    cmd : In(stream.Signature(StructLayout rows, beats, out_bits, reuse))
    vec : In(stream.Signature(ArrayLayout(signed(8), lanes)))
    weights : In(stream.Signature(ArrayLayout(signed(8), lanes)))
    rowparam : In(stream.Signature(StructLayout bias int32, mult unsigned(31), shift unsigned(6)))
    out : Out(stream.Signature(StructLayout value int32, last))
    busy : Out(1)
        A job is in progress.
    weight_wait : Out(1)
        The unit is ready for a weight beat that has not arrived (a cycle lost to the stream).

    Latency
    -------
    A row's result is on ``out`` one cycle after its last weight beat.

    Throughput
    ----------
    One weight beat (``lanes`` MACs) per cycle while results are taken; loading the vector
    costs ``beats`` cycles per job.
    """

    def __init__(self, *, lanes, max_beats, max_rows):
        for name, value in (("lanes", lanes), ("max_beats", max_beats), ("max_rows", max_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise TypeError(f"{name} must be a positive integer, not {value!r}")
        self._lanes = lanes
        self._max_beats = max_beats
        self._max_rows = max_rows
        vector = data.ArrayLayout(signed(8), lanes)
        super().__init__({
            "cmd": In(stream.Signature(data.StructLayout({
                "rows": range(max_rows + 1), "beats": range(max_beats + 1),
                "out_bits": OutBits, "reuse": 1}))),
            "vec": In(stream.Signature(vector)),
            "weights": In(stream.Signature(vector)),
            "rowparam": In(stream.Signature(data.StructLayout({
                "bias": signed(32), "mult": unsigned(31), "shift": unsigned(6)}))),
            "out": Out(stream.Signature(data.StructLayout({"value": signed(32), "last": 1}))),
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

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        vector = data.ArrayLayout(signed(8), lanes)
        m.submodules.buffer = buffer = memory.Memory(shape=vector, depth=self.max_beats, init=[])
        write = buffer.write_port()
        read = buffer.read_port(domain="comb")

        rows = Signal(range(self.max_rows + 1))
        beats = Signal(range(self.max_beats + 1))
        out_bits = Signal(OutBits)
        beat = Signal(range(self.max_beats + 1))
        row = Signal(range(self.max_rows + 1))
        acc = Signal(signed(48))
        param = Signal(self.rowparam.payload.shape())
        have_param = Signal()

        result_valid = Signal()
        result_acc = Signal(signed(48))
        result_param = Signal(self.rowparam.payload.shape())
        result_bits = Signal(OutBits)
        result_last = Signal()

        product = Signal(signed(48 + 32))
        m.d.comb += product.eq(result_acc * result_param.mult)
        rounded = round_shift(m, product, result_param.shift)
        limit = Signal(signed(33))
        with m.Switch(result_bits):
            with m.Case(OutBits.INT8):
                m.d.comb += limit.eq(127)
            with m.Case(OutBits.INT16):
                m.d.comb += limit.eq(32767)
            with m.Default():
                m.d.comb += limit.eq(2**31 - 1)
        value = Signal(signed(32))
        with m.If(rounded > limit):
            m.d.comb += value.eq(limit)
        with m.Elif(rounded < -limit - 1):
            m.d.comb += value.eq(-limit - 1)
        with m.Else():
            m.d.comb += value.eq(rounded)
        m.d.comb += [
            self.out.valid.eq(result_valid),
            self.out.payload.value.eq(value),
            self.out.payload.last.eq(result_last),
        ]
        with m.If(self.out.valid & self.out.ready):
            m.d.sync += result_valid.eq(0)

        dot = tree_sum(self.weights.payload[i] * read.data[i] for i in range(lanes))
        m.d.comb += read.addr.eq(beat)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [
                        rows.eq(self.cmd.payload.rows), beats.eq(self.cmd.payload.beats),
                        out_bits.eq(self.cmd.payload.out_bits), beat.eq(0), row.eq(0),
                    ]
                    with m.If(~is_zero(self.cmd.payload.rows) & ~is_zero(self.cmd.payload.beats)):
                        with m.If(self.cmd.payload.reuse):
                            m.d.sync += have_param.eq(0)
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
                # a row's parameters are taken with (or before) its first weight beat
                cur_param = Mux(have_param, param.as_value(), self.rowparam.payload.as_value())
                base = Mux(have_param, acc, self.rowparam.payload.bias)
                last_beat = beat == beats - 1
                # the final beat of a row needs a free result register
                can_take = (have_param | self.rowparam.valid) & (
                    ~last_beat | ~result_valid | (self.out.valid & self.out.ready))
                m.d.comb += [
                    self.busy.eq(1),
                    self.rowparam.ready.eq(~have_param),
                    self.weights.ready.eq(can_take),
                    self.weight_wait.eq(can_take & ~self.weights.valid),
                ]
                with m.If(self.weights.valid & can_take):
                    with m.If(last_beat):
                        final_row = row == rows - 1
                        m.d.sync += [
                            result_valid.eq(1), result_acc.eq(base + dot),
                            result_param.eq(cur_param), result_bits.eq(out_bits),
                            result_last.eq(final_row), beat.eq(0), have_param.eq(0),
                            row.eq(row + 1),
                        ]
                        with m.If(final_row):
                            m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [acc.eq(base + dot), beat.eq(beat + 1),
                                     param.eq(cur_param), have_param.eq(1)]
                with m.Elif(self.rowparam.valid & ~have_param):
                    m.d.sync += [param.eq(self.rowparam.payload), have_param.eq(1),
                                 acc.eq(self.rowparam.payload.bias)]
        return m
