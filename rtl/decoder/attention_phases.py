"""The arithmetic phases of the attention unit (:class:`~heteroreason.rtl.decoder.attention.
Attention`): the scores, their exponentials, the division, the weighted sum of values and the
output, each elaborated from the job's signals ``j``; and the latencies the timing model
reproduces."""

from amaranth.hdl import Cat, Const, Mux, Signal, signed, unsigned

from heteroreason.rtl.compare import equals, greater_split
from heteroreason.rtl.decoder.crossing import BOUNDARY_LATENCY
from heteroreason.rtl.decoder.mvu_stages import PACKED_LOW_BITS
from heteroreason.rtl.decoder.pipeline import (
    REQUANT_LATENCY,
    delay,
    requantize_pipelined,
    tree_latency,
    tree_sum_pipelined,
)

__all__ = ["ACCUMULATE_LATENCY", "DIVIDE_CYCLES", "EMIT_LATENCY", "EXP_LATENCY", "HANDOFF_CYCLES",
           "AttentionPhases", "accumulate_latency", "back_cycles", "exp_latency", "job_cycles",
           "jobs_cycles", "max_levels", "score_bits", "score_latency"]

# the stages' one-hot states: the score stage's, then the second stage's
_F_IDLE, _QUERY, _SCORE, _HELD = range(4)
_B_IDLE, _EXP, _DIVIDE, _ACCUMULATE, _EMIT = range(5)
_SUM_BITS = 32  # sum of up to 2**16 exp values of at most 2**15


class AttentionPhases:
    """The arithmetic phases of :class:`~heteroreason.rtl.decoder.attention.Attention` (which
    holds the ports, the parameters and the stages' signals they read: ``f`` the score stage's,
    ``b`` the second stage's)."""

    def _score(self, m, j) -> None:
        """A score per key row and head, each head's maximum kept (:func:`score_latency`); with
        several rows a cycle, a row past the length scores below every real one and a tree of
        comparisons, a register a level, finds the cycle's largest. The last score written,
        the job waits (``_HELD``) for the second stage."""
        hd, nh, nr = self._head_dim, self._heads, self._kv_rows
        keys, valid, last = self._rows(m, j, _SCORE, "k")
        at_tree = 3 + _score_packing_latency(nr) + tree_latency(hd)  # row taken -> tree's sums
        in_length = self._in_length(m, j, last, at_tree, "score")
        floor = -(1 << (score_bits(hd) - 1))
        products = self._score_products(m, j, keys)  # [row][head]: the lanes' products
        dots = []  # [row][head]
        for r in range(nr):
            row = []
            for h in range(nh):
                # the tree's sum registered once more, beside the running maximum it updates
                # (a row past the length: below every score)
                total = tree_sum_pipelined(m, products[r][h], name=f"score{h}_{r}")
                dot = Signal(signed(score_bits(hd)), name=f"score{h}_{r}_", reset_less=True)
                m.d.sync += dot.eq(Mux(in_length[r], total, floor) if nr > 1 else total)
                row.append(dot)
            dots.append(row)
        # each head's largest of the cycle's rows: a comparison and a register a level
        best_of_rows = [self._max_tree(m, [dots[r][h] for r in range(nr)], f"score_max{h}")
                        for h in range(nh)]
        levels = max_levels(nr)
        scores = [[delay(m, dots[r][h], levels, name=f"score{h}_{r}_d", reset_less=True)
                   for h in range(nh)] for r in range(nr)]
        # rows enter only in this pass (``_rows``), so a valid score is one of its rows: the
        # maximum's enable is this register and the comparison, nothing else
        valid = delay(m, valid, at_tree + 1 + levels, name="score_valid")
        with m.If(valid):
            for r in range(nr):
                for h in range(nh):
                    m.d.comb += j.s_wr.data[r][h].eq(scores[r][h])
            for h, dot in enumerate(best_of_rows):
                with m.If(greater_split(dot, j.best[h], parts=4)):
                    m.d.sync += j.best[h].eq(dot)
            m.d.comb += j.s_wr.en.eq(1)
            self._wrote(m, j)
            with m.If(j.done):
                m.d.sync += _goto(j, _SCORE, _HELD)

    def _score_products(self, m, j, keys) -> list:
        """Each row's and head's query-key products, each multiplier's operands in its own A and B
        registers (the key copied for each head), the products in M and P; with several rows,
        rows 2p and 2p + 1 share one (``k[2p] * 2**18 + k[2p + 1]`` packed before the copies,
        split after: two cycles more, :func:`score_latency`)."""
        hd, nh, nr, low = self._head_dim, self._heads, self._kv_rows, PACKED_LOW_BITS
        products = [[None] * nh for _ in range(nr)]
        if nr == 1:
            for h in range(nh):
                query = delay(m, j.query[h], 1, name=f"query{h}_0_", reset_less=True)
                key_h = delay(m, keys[0], 1, name=f"key{h}_0_", reset_less=True, keep=True)
                products[0][h] = [delay(m, query[i] * key_h[i], 2, name=f"qk{h}_0_{i}_",
                                        reset_less=True) for i in range(hd)]
            return products
        packed = []  # [pair][lane]: the pre-adder's sum, 27 bits
        for p in range(nr // 2):
            lanes = []
            for i in range(hd):
                operand = Signal(signed(8 + low + 1), name=f"kpacked{p}_{i}", reset_less=True)
                m.d.sync += operand.eq((keys[2 * p][i] << low) + keys[2 * p + 1][i])
                lanes.append(operand)
            packed.append(Cat(*lanes))
        for h in range(nh):
            query = delay(m, j.query[h], 2, name=f"query{h}_", reset_less=True)
            for p in range(nr // 2):
                key_h = delay(m, packed[p], 1, name=f"kpacked{h}_{p}_", reset_less=True,
                              keep=True)
                high_row, low_row = [], []
                for i in range(hd):
                    both = delay(m, query[i] * key_h[i * (8 + low + 1):
                                                      (i + 1) * (8 + low + 1)].as_signed(),
                                 2, name=f"qk{h}_{p}_{i}_", reset_less=True)
                    high, low_part = (Signal(signed(16), name=f"qk{h}_{r}_{i}_split",
                                             reset_less=True) for r in (2 * p, 2 * p + 1))
                    # the low product's sign borrowed one from the high one: give it back
                    m.d.sync += [high.eq((both >> low) + both[low - 1]),
                                 low_part.eq(both[:low].as_signed())]
                    high_row.append(high)
                    low_row.append(low_part)
                products[2 * p][h], products[2 * p + 1][h] = high_row, low_row
        return products

    def _max_tree(self, m, values, name):
        """The largest of ``values`` (signed, one width): a level of comparisons a cycle."""
        level, depth = list(values), 0
        while len(level) > 1:
            depth += 1
            nxt = []
            for k in range(0, len(level), 2):
                if k + 1 == len(level):
                    pick = level[k]
                else:
                    a, b = level[k], level[k + 1]
                    pick = Mux(greater_split(b, a, parts=4), b, a)
                nxt.append(delay(m, pick, 1, name=f"{name}_l{depth}_{k}", reset_less=True))
            level = nxt
        return level[0]

    def _in_length(self, m, j, last, cycles, name):
        """Which of a cycle's rows lie within the job's length, ``cycles`` after the rows'
        ``last`` flag (every row but the last cycle's tail): one flag a row."""
        if self._kv_rows == 1:
            return [Const(1, 1)]
        last = delay(m, last, cycles, name=f"{name}_last")
        return [~last | j.tail[r] for r in range(self._kv_rows)]

    def _exp(self, m, j) -> None:
        """Each score's exponential from the table, summed per head: the score read, less the
        maximum, requantized (:func:`requantize_pipelined`, saturated to 16 bits: any index
        beyond 255 reads entry 255 alike), negated, clamped to the table's index, the table
        read, registered (:data:`EXP_LATENCY`). With several rows a cycle, rows past the length
        are left out and a registered adder tree sums a head's (:func:`exp_latency`)."""
        nr = self._kv_rows
        issue = j.state[_EXP] & j.issuing
        self._issue(m, j, issue)
        sum_latency = tree_latency(nr)
        valid = delay(m, issue, EXP_LATENCY + sum_latency, name="exp_valid")
        in_length = self._in_length(m, j, issue & j.issue_last, EXP_LATENCY, "exp")
        score = delay(m, j.s_rd.data, 1, name="exp_score", reset_less=True)
        es = [[None] * self._heads for _ in range(nr)]
        for r in range(nr):
            for h in range(self._heads):
                e_rd = j.e_rds[r * self._heads + h]
                diff = delay(m, score[r][h] - j.best[h], 1, name=f"exp_diff{h}_{r}_",
                             reset_less=True)
                scaled = requantize_pipelined(m, diff, j.job.exp_mult, j.job.exp_shift,
                                              Const(0, 2), widths=(16,), name=f"exp{h}_{r}_")
                neg = delay(m, -scaled, 1, name=f"exp_neg{h}_{r}_", reset_less=True)
                # the index registered before the table (a small table may become logic)
                index = delay(m, Mux(neg[8:].any(), 255, neg[:8]), 1,
                              name=f"exp_index{h}_{r}_", reset_less=True)
                m.d.comb += e_rd.addr.eq(index)
                es[r][h] = delay(m, e_rd.data, 1, name=f"exp_e{h}_{r}_", reset_less=True)
        for h in range(self._heads):
            # the cycle's exponentials within the length, summed (registered once a tree
            # stage); the table's values written as they are, a tree stage later
            if nr == 1:
                added = es[0][h]
            else:
                added = tree_sum_pipelined(
                    m, [Mux(in_length[r], es[r][h], 0) for r in range(nr)],
                    name=f"exp_sum{h}")
            with m.If(j.state[_EXP]):
                for r in range(nr):
                    m.d.comb += j.e_wr.data[r][h].eq(
                        delay(m, es[r][h], sum_latency, name=f"exp_w{h}_{r}_",
                              reset_less=True))
                with m.If(valid):
                    m.d.sync += j.total[h].eq(j.total[h] + added)
        with m.If(j.state[_EXP] & valid):
            m.d.comb += j.e_wr.en.eq(1)
            self._wrote(m, j)
            with m.If(j.done):
                m.d.sync += [*_goto(j, _EXP, _DIVIDE), j.step.eq(0), j.step_last.eq(0),
                             j.step_first.eq(1)]
                m.d.sync += [j.remainder[h].eq(0) for h in range(self._heads)]

    def _divide(self, m, j) -> None:
        """``2**46 // total`` per head, a quotient bit a cycle from bit 46 down (the dividend's
        one set bit enters on the first step, a registered flag). The trial subtraction runs
        whatever the state (no state decode before its carry chain)."""
        steps = []
        for h in range(self._heads):
            shifted = Signal(unsigned(_SUM_BITS + 1), name=f"shifted{h}")
            less = Signal(signed(_SUM_BITS + 2), name=f"less{h}")
            m.d.comb += [shifted.eq(Cat(j.step_first, j.remainder[h])),
                         less.eq(shifted - j.total[h])]
            fits = ~less[-1]
            steps += [j.remainder[h].eq(Mux(fits, less[:_SUM_BITS], shifted[:_SUM_BITS])),
                      j.quotient[h].eq(Cat(fits, j.quotient[h][:-1]))]
        with m.If(j.state[_DIVIDE]):
            m.d.sync += [*steps, j.step.eq(j.step + 1),
                         j.step_last.eq(equals(j.step, DIVIDE_NEXT_TO_LAST)),
                         j.step_first.eq(0)]
            with m.If(j.step_last):
                self._next_pass(m, j, _DIVIDE, _ACCUMULATE)  # (``acc`` cleared: _accumulate)


def _goto(j, source: int, target: int) -> list:
    """A transition of the one-hot state: its two bits alone (every other bit's next state
    depends on none of the transitions that do not touch it)."""
    return [j.state[source].eq(0), j.state[target].eq(1)]


def max_levels(kv_rows: int) -> int:
    """Levels of the comparison tree over a cycle's ``kv_rows`` scores (a register each)."""
    return (kv_rows - 1).bit_length()


def _score_packing_latency(kv_rows: int) -> int:
    """Registers the scores' packed pairs of rows add: the packed key's and the split ones'."""
    return 2 if kv_rows > 1 else 0


def score_latency(head_dim: int, kv_rows: int = 1) -> int:
    """Cycles from a key row taken to its scores written: the row's three registers, M and P,
    the tree and the sum's register; with several rows, the packing's two and the comparisons'
    (:func:`max_levels`)."""
    return 6 + _score_packing_latency(kv_rows) + tree_latency(head_dim) + max_levels(kv_rows)


DIVIDE_CYCLES = 47
# the division's step before its last (steps count 0 to DIVIDE_CYCLES - 1): the registered
# ``step_last`` and the accumulators' clear are set on it
DIVIDE_NEXT_TO_LAST = DIVIDE_CYCLES - 2
HANDOFF_CYCLES = 1  # the last score written -> the second stage's first pass (a cycle held)
EXP_LATENCY = 3 + REQUANT_LATENCY + 4  # issue -> the exponential written
ACCUMULATE_LATENCY = 2 + 4 + 1 + 2  # row taken -> its products added to the accumulators
EMIT_LATENCY = 1 + REQUANT_LATENCY  # a beat issued -> on ``out``


def exp_latency(kv_rows: int = 1) -> int:
    """Cycles from a score read issued to its exponential written and summed: the table's
    :data:`EXP_LATENCY`, then the adder tree over the cycle's rows."""
    return EXP_LATENCY + tree_latency(kv_rows)


def accumulate_latency(kv_rows: int = 1) -> int:
    """Cycles from a value row taken to its products in the accumulators:
    :data:`ACCUMULATE_LATENCY`, then the adder tree over the cycle's rows."""
    return ACCUMULATE_LATENCY + tree_latency(kv_rows)


def score_bits(head_dim: int) -> int:
    """Bits of a score: a sum of ``head_dim`` int8 x int8 products, a bit per adder level."""
    return 16 + (head_dim - 1).bit_length()


def job_cycles(*, head_dim: int, heads: int, width: int, length: int, kv_rows: int = 1) -> int:
    """Cycles of a job from its last query beat to its last output without stalls: each of the
    three passes takes ``ceil(length / kv_rows)`` cycles of rows; ``pv`` runs
    :data:`~heteroreason.rtl.decoder.crossing.BOUNDARY_LATENCY` cycles behind the rest."""
    groups = -(-length // kv_rows)
    return (3 * groups + score_latency(head_dim, kv_rows) + HANDOFF_CYCLES
            + exp_latency(kv_rows) + DIVIDE_CYCLES + accumulate_latency(kv_rows)
            + heads * head_dim // width + EMIT_LATENCY + BOUNDARY_LATENCY)


def back_cycles(*, head_dim: int, heads: int, width: int, length: int, kv_rows: int = 1) -> int:
    """Cycles between two jobs' last outputs when the later one's scores are done before the
    earlier one leaves the second stage: its two passes, the division, the outputs and the
    hand-over (in the cycle the stage is idle again); the stage is free again two boundary
    crossings after its last output would have left beside the scores (``pv`` runs behind,
    and its last beat's pulse crosses back)."""
    groups = -(-length // kv_rows)
    return (2 * groups + exp_latency(kv_rows) + DIVIDE_CYCLES + accumulate_latency(kv_rows)
            + heads * head_dim // width + EMIT_LATENCY + HANDOFF_CYCLES
            + 2 * BOUNDARY_LATENCY)


def jobs_cycles(*, jobs: int, head_dim: int, heads: int, width: int, length: int,
                kv_rows: int = 1) -> int:
    """Cycles from the first of ``jobs`` jobs' last query beat to the last job's last output
    without stalls, each later job's queries in while the job two before it is still in the
    second stage (its scores then wait for the second stage, not the other way round): the
    first job's :func:`job_cycles`, then :func:`back_cycles` a job."""
    args = dict(head_dim=head_dim, heads=heads, width=width, length=length, kv_rows=kv_rows)
    return job_cycles(**args) + (jobs - 1) * back_cycles(**args)
