"""cocotb testbench of the matrix-vector unit against the integer reference's ``requant``: random
jobs (shapes, weights, vectors, biases, multipliers, output widths; with several vectors a beat,
how many each job loads), an HBM-like weight stream with random gaps, random backpressure on the
results; every result matched in order, those of vectors a job left stale too
(:class:`~heteroreason.sim.verify.mvu_model.VectorBuffers`)."""

from __future__ import annotations

from collections import deque

import cocotb
import numpy as np

from heteroreason.model.spec.numerics.qwen2_int8 import quant_multiplier
from heteroreason.rtl.decoder.mvu import MatVecUnit, OutBits
from heteroreason.rtl.decoder.weight_schedule import linear_schedule
from heteroreason.sim.verify.mvu_model import VectorBuffers
from heteroreason.sim.verify.tb.common import TbBase, param, seeded_rng, stimulus
from heteroreason.sim.verify.tb.streams import Payload, StreamSink, StreamSource

BITS = {OutBits.INT8: 8, OutBits.INT16: 16, OutBits.INT32: 32}


class MvuTB(TbBase):
    def __init__(self, dut, *, name: str, idle: float, backpressure: float):
        seed, rng = seeded_rng(name)
        super().__init__(dut, seed=seed, name=name)
        self.lanes = param("lanes")
        self.max_beats = param("max_beats")
        self.max_rows = param("max_rows")
        self.k = param("rows_per_beat")
        self.vectors = param("vectors")
        self.np_rng = np.random.default_rng(rng.randrange(2**32))
        shape = MatVecUnit(lanes=self.lanes, max_beats=self.max_beats, max_rows=self.max_rows,
                           rows_per_beat=self.k, vectors=self.vectors).signature.members
        layout = {n: shape[n].signature.members["payload"].shape
                  for n in ("cmd", "vec", "weights", "rowparam", "out")}
        # with rows_per_beat > 1 a parameter beat holds k of one row's struct
        self.row_param = Payload(layout["rowparam"] if self.k == 1
                                 else layout["rowparam"].elem_shape)
        self.cmd = StreamSource(dut, "cmd", layout["cmd"], rng=rng, idle=idle)
        self.vec = StreamSource(dut, "vec", layout["vec"], rng=rng, idle=idle)
        self.weights = StreamSource(dut, "weights", layout["weights"], rng=rng, idle=idle)
        self.rowparam = StreamSource(dut, "rowparam", layout["rowparam"], rng=rng, idle=idle)
        self.out = StreamSink(dut, "out", layout["out"], rng=rng, backpressure=backpressure)
        self.expected: deque[tuple[int, int]] = deque()
        self.matched = 0
        # an earlier test of the same simulation left the buffers as it pleased
        self.buffers = VectorBuffers(vectors=self.vectors, max_beats=self.max_beats,
                                     lanes=self.lanes, zeros=False)
        self.unknown = 0
        self.last_cols = None

    def idle_inputs(self):
        for source in (self.cmd, self.vec, self.weights, self.rowparam):
            source.idle_port()
        self.dut.out__ready.value = 0

    def drive(self):
        for port in (self.cmd, self.vec, self.weights, self.rowparam, self.out):
            port.drive()

    def observe(self):
        for source in (self.cmd, self.vec, self.weights, self.rowparam):
            source.observe()
        beat = self.out.observe()
        if beat is not None:
            count = self.k * self.vectors
            values = [beat["value"]] if count == 1 else \
                [_signed32(beat["value"] >> 32 * j) for j in range(count)]
            for j, value in enumerate(values):
                self.check(bool(self.expected), f"result {beat} with nothing expected")
                want = self.expected.popleft()
                got = (value, beat["last"] if j == count - 1 else 0)
                if want[0] is None:  # a vector no job of this test has loaded: any value
                    self.unknown += 1
                    self.check(got[1] == want[1], f"result {j} of {beat}: last != {want[1]}")
                    continue
                self.check(got == want, f"result {j} of {beat}: {got} != {want}")
                self.matched += 1

    def queue_job(self):
        rng, k = self.np_rng, self.k
        groups = int(rng.integers(1, self.max_rows + 1))
        rows = groups * k
        reuse = self.last_cols is not None and rng.random() < 0.3
        # a job on the previous vectors sends none (the unit keeps its buffers); a job that
        # loads may load fewer vectors than the unit has (the others stay as they were)
        cols = self.last_cols if reuse else int(rng.integers(1, self.max_beats * self.lanes + 1))
        count = 0 if reuse else int(rng.integers(1, self.vectors + 1))
        xs = [rng.integers(-128, 128, cols) for _ in range(count)]
        self.last_cols = cols
        w = rng.integers(-127, 128, (rows, cols))
        bias = rng.integers(-2**20, 2**20, rows)
        mult, shift = quant_multiplier(np.exp(rng.uniform(np.log(1e-6), np.log(1e-2), rows)))
        out_bits = OutBits(int(rng.integers(0, 3)))
        sched = linear_schedule(w, lanes=self.lanes, bias=bias, multiplier=mult, shift=shift,
                                rows_per_beat=k)
        command = {"rows": groups, "beats": sched.beats_per_row, "out_bits": out_bits.value,
                   "reuse": int(reuse)}
        self.cmd.send(**command | ({"vectors": count} if self.vectors > 1 else {}))
        for x in xs:
            padded = np.zeros(sched.beats_per_row * self.lanes, dtype=np.int64)
            padded[:cols] = x
            for b in range(sched.beats_per_row):
                self.vec.queue.append(dict(enumerate(
                    int(v) for v in padded[b * self.lanes:(b + 1) * self.lanes])))
        self.buffers.load(xs, sched.beats_per_row)
        params = [{"bias": int(bias[r]), "mult": int(mult[r]), "shift": int(shift[r])}
                  for r in range(rows)]
        for g in range(groups):
            if k == 1:
                self.rowparam.send(**params[g])
            else:
                self.rowparam.queue.append({j: self.row_param.pack(params[g * k + j])
                                            for j in range(k)})
        for beat in sched.beats:
            self.weights.queue.append(dict(enumerate(int(v) for v in beat)))
        results = self.buffers.results(w, bias, mult, shift, BITS[out_bits],
                                       sched.beats_per_row, k)
        for r, value in enumerate(results):
            self.expected.append((value, int(r == len(results) - 1)))


def _signed32(word: int) -> int:
    word &= 0xFFFF_FFFF
    return word - (1 << 32) if word >> 31 else word


@cocotb.test()
@cocotb.parametrize((("idle", "backpressure"), [(0.0, 0.0), (0.3, 0.3)]))
async def random_jobs(dut, idle, backpressure):
    jobs = stimulus().mvu_jobs
    tb = MvuTB(dut, name=f"random_jobs[idle={idle},bp={backpressure}]", idle=idle,
               backpressure=backpressure)
    tb.log.info("COCOTB_RANDOM_SEED=%d lanes=%d rows_per_beat=%d vectors=%d", tb.seed,
                tb.lanes, tb.k, tb.vectors)
    await tb.reset()
    for _ in range(jobs):
        tb.queue_job()
    await tb.run_until(lambda: not tb.expected, limit=jobs * 5000, what=f"{jobs} jobs")
    for _ in range(3):
        await tb.step()
    tb.check(not any(s.busy for s in (tb.cmd, tb.vec, tb.weights, tb.rowparam)),
             "inputs left unconsumed")
    tb.log.info("%d results matched in %d cycles (%d more of never-loaded buffers, unchecked)",
                tb.matched, tb.cycle, tb.unknown)
    tb.check(tb.unknown < tb.matched // 4, "many results read buffers no job had loaded")
