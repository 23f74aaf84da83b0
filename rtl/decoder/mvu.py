"""Matrix-vector unit: int8 x int8 dot products at ``lanes`` MACs per cycle with requantization."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.rtl.decoder.mvu_stages import (
    PACKED_LOW_BITS,
    MatVecStages,
    OutBits,
    result_latency,
)
from heteroreason.rtl.decoder.pipeline import GROUP_BITS, Mirrored
from heteroreason.rtl.limits import MULTIPLE_LIMIT, SIZE_LIMIT, WIDTH_LIMIT

__all__ = ["PACKED_LOW_BITS", "MatVecUnit", "OutBits", "result_latency", "write_group_lanes"]


def write_group_lanes(lanes: int) -> int:
    """Lanes of a column of the vector buffer (a memory of its own, with its own copies of the
    load flag and of the beat counter): the most that divide ``lanes`` and hold at most
    :data:`~heteroreason.rtl.decoder.pipeline.GROUP_BITS` bits of int8 (112 of 448 lanes, 128
    of 512)."""
    checks.integer("lanes", lanes, low=1)
    return max(g for g in range(1, min(lanes, GROUP_BITS // 8) + 1) if lanes % g == 0)

class MatVecUnit(MatVecStages, wiring.Component):
    """``y[r] = sat(rshift_round((bias[r] + sum_c W[r, c] x[c]) * mult[r], shift[r]))``.

    The arithmetic of :mod:`heteroreason.model.spec.numerics.qwen2_int8` (``requant``) for one
    linear operator; the weights arrive in the order of
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
            high = MULTIPLE_LIMIT if name in ("rows_per_beat", "vectors") else \
                WIDTH_LIMIT if name == "lanes" else SIZE_LIMIT
            checks.integer(name, value, low=1, high=high, error=TypeError)
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
        return result_latency(self.lanes, vectors=self.vectors,
                              rows_per_beat=self.rows_per_beat)

    @property
    def result_buffer(self) -> int:
        """Results the output queue holds: enough for one a cycle with ``out`` always ready."""
        return self.result_latency + 2

    def elaborate(self, platform):
        m = Module()
        lanes, n = self.lanes, self.vectors
        vector = data.ArrayLayout(signed(8), lanes)
        # each vector's buffer is a memory a group of lanes (a column), whose write enable comes
        # from its own copy of the load flag (``load_write``) and whose address from its own
        # copy of the beat: no control reaches more than GROUP_BITS bits of memory
        group = write_group_lanes(lanes)
        columns = lanes // group
        beat = Mirrored(n * columns, name="beat", shape=range(self.max_beats + 1))
        writes, reads, read_data = [], [], []
        for v in range(n):  # a buffer a vector, read side by side
            writes.append([])
            reads.append([])
            for c in range(columns):
                column = memory.Memory(shape=data.ArrayLayout(signed(8), group),
                                       depth=self.max_beats, init=[])
                name = "buffer" + (f"{v}" if n > 1 else "") + (f"_{c}" if columns > 1 else "")
                m.submodules[name] = column
                writes[v].append(column.write_port())
                reads[v].append(column.read_port())  # synchronous: block or registered LUT RAM
            joined = Signal(vector, name="buffer_data" + (f"{v}" if n > 1 else ""))
            m.d.comb += joined.eq(Cat(*(port.data.as_value() for port in reads[v])))
            read_data.append(joined)
        # bit v: vector v is being loaded (set on entering LOAD, moved on at each vector's end)
        load_write = Mirrored(columns, name="load_write", shape=n)

        rows = Signal(range(self.max_rows + 1))
        beats = Signal(range(self.max_beats + 1))
        out_bits = Signal(OutBits)
        row = Signal(range(self.max_rows + 1))
        param = Signal(self.rowparam.payload.shape(), reset_less=True)  # ``have_param``
        have_param = Signal()
        # registered flags of the beat and row being taken (no comparison on the take path)
        beats_m1 = Signal(range(self.max_beats + 1))
        one_beat = Signal()
        last_beat = Signal()
        final_row = Signal()

        st = SimpleNamespace()  # what the stages share
        vars(st).update(rows=rows, beats=beats, out_bits=out_bits, beat=beat, row=row, param=param)
        vars(st).update(have_param=have_param, beats_m1=beats_m1, one_beat=one_beat)
        vars(st).update(last_beat=last_beat, final_row=final_row, lanes=lanes, n=n, writes=writes)
        vars(st).update(reads=reads, read_data=read_data, load_write=load_write, group=group)
        self._result_queue(m, st)
        self._stage0(m, st)
        self._control(m, st)
        self._products(m, st)
        self._accumulate(m, st)
        return m
