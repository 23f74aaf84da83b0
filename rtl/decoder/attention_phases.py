"""The arithmetic phases of the attention unit (:class:`~heteroreason.rtl.decoder.attention.
Attention`): the scores, their exponentials, the division, the weighted sum of values and the
output, each elaborated from the job's signals ``j``; and the latencies the timing model
reproduces."""

from amaranth.hdl import Cat, Const, Mux, Signal, signed, unsigned

from heteroreason.rtl.compare import equals, greater_split
from heteroreason.rtl.decoder.pipeline import (
    REQUANT_LATENCY,
    StallingPipeline,
    delay,
    requantize_pipelined,
    tree_latency,
    tree_sum_pipelined,
)

__all__ = ["ACCUMULATE_LATENCY", "DIVIDE_CYCLES", "EMIT_LATENCY", "EXP_LATENCY", "AttentionPhases",
           "job_cycles", "score_bits", "score_latency"]

_IDLE, _QUERY, _SCORE, _EXP, _DIVIDE, _ACCUMULATE, _EMIT = range(7)
_SUM_BITS = 32  # sum of up to 2**16 exp values of at most 2**15


class AttentionPhases:
    """The arithmetic phases of :class:`~heteroreason.rtl.decoder.attention.Attention` (which
    holds the ports, the parameters and the job's signals they read)."""

    def _score(self, m, j) -> None:
        """A score per key row and head (each head's maximum kept): the products registered as
        a DSP's M and P, then the registered adder tree (:func:`score_latency`)."""
        hd, nh = self._head_dim, self._heads
        key, valid = self._rows(m, j, _SCORE, "k")
        dots = []
        for h in range(nh):
            # each multiplier's own operand registers (its A and B, placed beside it): the
            # query is fixed during the pass, the key row is copied for each head
            query = delay(m, j.query[h], 1, name=f"query{h}_", reset_less=True)
            key_h = delay(m, key, 1, name=f"key{h}_", reset_less=True, keep=True)
            products = [delay(m, query[i] * key_h[i], 2, name=f"qk{h}_{i}_", reset_less=True)
                        for i in range(hd)]
            # the tree's sum registered once more, beside the running maximum it updates
            dots.append(delay(m, tree_sum_pipelined(m, products, name=f"score{h}"), 1,
                              name=f"score{h}_", reset_less=True))
            assert dots[-1].shape() == signed(score_bits(hd)), dots[-1].shape()
        # rows enter only in this pass (``_rows``), so a valid score is one of its rows: the
        # maximum's enable is this register and the comparison, nothing else
        valid = delay(m, valid, 4 + tree_latency(hd), name="score_valid")
        with m.If(valid):
            for h, dot in enumerate(dots):
                m.d.comb += j.s_wr.data[h].eq(dot)
                with m.If(greater_split(dot, j.best[h], parts=4)):
                    m.d.sync += j.best[h].eq(dot)
            m.d.comb += j.s_wr.en.eq(1)
            self._wrote(m, j)
            with m.If(j.done):
                self._next_pass(m, j, _SCORE, _EXP)
                m.d.sync += [j.total[h].eq(0) for h in range(nh)]

    def _exp(self, m, j) -> None:
        """Each score's exponential from the table, summed per head: the score read, less the
        maximum, requantized (:func:`requantize_pipelined`, saturated to 16 bits: any index
        beyond 255 reads entry 255 alike), negated, clamped to the table's index, the table
        read, registered (:data:`EXP_LATENCY`)."""
        issue = j.state[_EXP] & j.issuing
        self._issue(m, j, issue)
        valid = delay(m, issue, EXP_LATENCY, name="exp_valid")
        score = delay(m, j.s_rd.data, 1, name="exp_score", reset_less=True)
        for h, e_rd in enumerate(j.e_rds):
            diff = delay(m, score[h] - j.best[h], 1, name=f"exp_diff{h}", reset_less=True)
            scaled = requantize_pipelined(m, diff, j.job.exp_mult, j.job.exp_shift,
                                          Const(0, 2), widths=(16,), name=f"exp{h}")
            neg = delay(m, -scaled, 1, name=f"exp_neg{h}", reset_less=True)
            # the index registered before the table (a small table may become logic)
            index = delay(m, Mux(neg[8:].any(), 255, neg[:8]), 1, name=f"exp_index{h}",
                          reset_less=True)
            m.d.comb += e_rd.addr.eq(index)
            e = delay(m, e_rd.data, 1, name=f"exp_e{h}", reset_less=True)
            with m.If(j.state[_EXP]):
                m.d.comb += j.s_wr.data[h].eq(e)
                with m.If(valid):
                    m.d.sync += j.total[h].eq(j.total[h] + e)
        with m.If(j.state[_EXP] & valid):
            m.d.comb += j.s_wr.en.eq(1)
            self._wrote(m, j)
            with m.If(j.done):
                m.d.sync += [*_goto(j, _EXP, _DIVIDE), j.step.eq(0), j.step_last.eq(0)]
                m.d.sync += [j.remainder[h].eq(0) for h in range(self._heads)]

    def _divide(self, m, j) -> None:
        """``2**46 // total`` per head, a quotient bit a cycle from bit 46 down (the dividend's
        one set bit enters on the first step). The trial subtraction runs whatever the state
        (from registers alone: no state decode before its carry chain); the state enables the
        registers it updates."""
        steps = []
        for h in range(self._heads):
            shifted = Signal(unsigned(_SUM_BITS + 1), name=f"shifted{h}")
            less = Signal(signed(_SUM_BITS + 2), name=f"less{h}")
            m.d.comb += [shifted.eq(Cat(equals(j.step, 0), j.remainder[h])),
                         less.eq(shifted - j.total[h])]
            fits = ~less[-1]
            steps += [j.remainder[h].eq(Mux(fits, less[:_SUM_BITS], shifted[:_SUM_BITS])),
                      j.quotient[h].eq(Cat(fits, j.quotient[h][:-1]))]
        with m.If(j.state[_DIVIDE]):
            m.d.sync += [*steps, j.step.eq(j.step + 1), j.step_last.eq(equals(j.step, 45))]
            with m.If(j.step_last):
                self._next_pass(m, j, _DIVIDE, _ACCUMULATE)
                m.d.sync += j.acc.eq(0)

    def _accumulate(self, m, j) -> None:
        """The probability-weighted sum of the value rows: each row's probabilities
        ``(e * recip + 2**29) >> 30`` from three registered partial products, then
        ``heads * head_dim`` registered MACs (:data:`ACCUMULATE_LATENCY`)."""
        hd = self._head_dim
        value, valid = self._rows(m, j, _ACCUMULATE, "v")
        valid = j.state[_ACCUMULATE] & delay(m, valid, ACCUMULATE_LATENCY - 2,
                                                     name="acc_valid")
        # the exponentials were read with the rows; stage 2: registered beside the multipliers
        e = delay(m, j.s_rd.data, 1, name="acc_e", reset_less=True)
        value = delay(m, value, 5, name="acc_value", reset_less=True)
        for h in range(self._heads):
            q = j.quotient[h]
            # stages 3-4: the partial products (M, P); 5: two sums; 6: the probability
            pp = [delay(m, e[h].as_unsigned()[:16] * q[lo:hi], 2, name=f"pp{h}_{lo}_",
                        reset_less=True) for lo, hi in ((0, 17), (17, 34), (34, 47))]
            low = delay(m, pp[0] + (pp[1] << 17), 1, name=f"pp_low{h}", reset_less=True)
            high = delay(m, Cat(Const(1 << 29, 34), pp[2]), 1, name=f"pp_high{h}",
                         reset_less=True)
            prob = delay(m, (low + high)[30:47], 1, name=f"prob{h}", reset_less=True)
            for i in range(hd):
                # 7: the probability copied beside each MAC (its A register: one register
                # driving every lane is a long route); 8-9: the product (M, P); then the sum
                prob_i = delay(m, prob, 1, name=f"prob{h}_{i}_", reset_less=True, keep=True)
                term = delay(m, prob_i * value[i], 2, name=f"pv{h}_{i}_", reset_less=True)
                with m.If(valid):
                    m.d.sync += j.acc[h * hd + i].eq(j.acc[h * hd + i] + term)
        with m.If(valid):
            self._wrote(m, j)
            with m.If(j.done):
                m.d.sync += [*_goto(j, _ACCUMULATE, _EMIT), j.beat.eq(0), j.issuing.eq(1)]

    def _emit(self, m, j) -> None:
        """The requantized outputs, ``width`` a beat, through a pipeline that stalls with
        ``out`` (:data:`EMIT_LATENCY`; ``issued`` counts the beats in)."""
        width = self._width
        beats = self._heads * self._head_dim // width
        pipe = StallingPipeline(m, EMIT_LATENCY, ready=self.out.ready, name="emit")
        emitting = j.state[_EMIT] & j.issuing
        last = equals(j.beat, beats - 1)
        m.d.comb += [pipe.issue.eq(emitting), pipe.issue_tag.eq(last)]
        with m.If(emitting & pipe.advance):
            m.d.sync += j.beat.eq(j.beat + 1)
            with m.If(last):
                m.d.sync += j.issuing.eq(0)
        chunk = pipe.stage(j.acc.as_value().word_select(j.beat, 32 * width), "emit_chunk")
        for k in range(width):
            m.d.comb += self.out.payload.value[k].eq(requantize_pipelined(
                m, chunk[32 * k:32 * (k + 1)].as_signed(), j.job.out_mult, j.job.out_shift,
                Const(0, 2), widths=(8,), en=pipe.advance, name=f"out{k}"))
        m.d.comb += [self.out.valid.eq(pipe.out_valid), self.out.payload.last.eq(pipe.out_tag)]
        with m.If(self.out.valid & self.out.ready & self.out.payload.last):
            m.d.sync += _goto(j, _EMIT, _IDLE)


def _goto(j, source: int, target: int) -> list:
    """A transition of the one-hot state: its two bits alone (every other bit's next state
    depends on none of the transitions that do not touch it)."""
    return [j.state[source].eq(0), j.state[target].eq(1)]


def score_latency(head_dim: int) -> int:
    """Cycles from a key row taken to its scores written: the row registered twice and once
    more beside each head's multipliers, the products' M and P, the adder tree's stages and
    the sum's register beside the maximum."""
    return 6 + tree_latency(head_dim)


DIVIDE_CYCLES = 47
EXP_LATENCY = 3 + REQUANT_LATENCY + 4  # issue -> the exponential written
ACCUMULATE_LATENCY = 2 + 4 + 1 + 2  # row taken -> its products added to the accumulators
EMIT_LATENCY = 1 + REQUANT_LATENCY  # a beat issued -> on ``out``


def score_bits(head_dim: int) -> int:
    """Bits of a score: a sum of ``head_dim`` int8 x int8 products, a bit per adder level."""
    return 16 + (head_dim - 1).bit_length()


def job_cycles(*, head_dim: int, heads: int, width: int, length: int) -> int:
    """Cycles of a job from its last query beat to its last output without stalls."""
    return (3 * length + score_latency(head_dim) + EXP_LATENCY + DIVIDE_CYCLES
            + ACCUMULATE_LATENCY + heads * head_dim // width + EMIT_LATENCY)
