"""Greedy sampler: a running argmax over the LM head's int32 logits, so logits are never stored."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.rtl.compare import equals, greater_split
from heteroreason.rtl.limits import DELIMITER_LIMIT, SIZE_LIMIT, WIDTH_LIMIT

__all__ = ["LATENCY", "ArgmaxSampler", "latency"]

LATENCY = 4  # the last logit taken -> the token offered, one logit a beat


def latency(width: int) -> int:
    """The last beat taken -> the token offered, at ``width`` logits a beat: :data:`LATENCY`
    and a registered level of the comparison tree for every halving of ``width``."""
    checks.power_of_two("width", width)
    return LATENCY + width.bit_length() - 1


class ArgmaxSampler(wiring.Component):
    """Takes ``width`` logits per beat (vocabulary order, ``last`` on the final beat) and emits
    the index of the largest; the lowest index wins ties
    (:func:`heteroreason.model.spec.numerics.qwen2_float.greedy`).
    The result is marked ``step_end`` when it is one of the step-delimiter ids and ``eos`` when
    it is the end-of-sequence id.

    Parameters
    ----------
    vocab : int
        Vocabulary size.
    delimiters : tuple of int
        Token ids that end a reasoning step (e.g. the ids of "\\n\\n").
    eos : int
        End-of-sequence id (it ends a step too).
    width : int
        Logits a beat: a power of two that divides ``vocab``. At 1 the payload's value is a
        scalar.

    Members
    -------
    logits : In(stream.Signature(StructLayout value signed(32) [x width], last))
    token : Out(stream.Signature(StructLayout token, step_end, eos))

    Latency
    -------
    The token is offered :func:`latency` (``width``) cycles after the last beat. Above one
    logit a beat, a tree of pairwise comparisons, one registered level a cycle, reduces each
    beat to its largest logit (the higher index only when greater). The beats' (or logits')
    candidates go to two running maxima in turn (even and odd beats), each compared in one
    cycle and updated in the next, so that no comparison and update share a cycle; then the
    two maxima compared (each one's marks found beside), then the winner and its marks picked.

    Throughput
    ----------
    ``width`` logits per cycle.
    """

    def __init__(self, *, vocab, delimiters=(), eos=0, width=1):
        checks.integer("vocab", vocab, low=2, high=SIZE_LIMIT, error=TypeError)
        checks.power_of_two("width", width, divides=(vocab, "vocab"), high=WIDTH_LIMIT)
        delimiters = tuple(delimiters)
        if len(delimiters) > DELIMITER_LIMIT:
            raise ValueError(f"delimiters must be at most {DELIMITER_LIMIT} token ids (a "
                             f"comparator each), not {len(delimiters):,}")
        for name, ids in (("delimiters", delimiters), ("eos", (eos,))):
            bad = [t for t in ids if isinstance(t, bool) or not isinstance(t, int)
                   or not 0 <= t < vocab]
            if bad:
                raise ValueError(f"{name} must be token ids in [0, {vocab}), not {bad[0]!r}")
        self._vocab = vocab
        self._delimiters = tuple(delimiters)
        self._eos = eos
        self._width = width
        value = signed(32) if width == 1 else data.ArrayLayout(signed(32), width)
        super().__init__({
            "logits": In(stream.Signature(data.StructLayout({"value": value, "last": 1}))),
            "token": Out(stream.Signature(data.StructLayout({
                "token": range(vocab), "step_end": 1, "eos": 1}))),
        })

    @property
    def vocab(self):
        return self._vocab

    @property
    def delimiters(self):
        return self._delimiters

    @property
    def eos(self):
        return self._eos

    @property
    def width(self):
        return self._width

    def elaborate(self, platform):
        m = Module()
        width = self._width
        index = Signal(range(max(self.vocab // width, 2)))  # logits (beats) in
        busy = Signal()  # from the last logit until the token is taken
        full = Signal()
        result = Signal(self.token.payload.shape())
        m.d.comb += [self.token.valid.eq(full), self.logits.ready.eq(~busy),
                     self.token.payload.eq(result)]
        with m.If(self.token.valid & self.token.ready):
            m.d.sync += [full.eq(0), busy.eq(0)]
        best = [Signal(signed(32), name=f"best{k}") for k in (0, 1)]
        best_index = [Signal(range(self.vocab), name=f"best_index{k}") for k in (0, 1)]
        # a candidate compared with its lane's maximum (the lane: its beat's parity), registered
        # with the verdict; its lane's maximum updated the cycle after, before the lane's next
        # candidate (two cycles later at the earliest) is compared
        # (named as the one-logit Verilog names them: ``cand`` unnamed, ``cand_index`` named)
        cand, cand_index = Signal(signed(32)), Signal(range(self.vocab), name="cand_index")
        cand_valid, cand_better, cand_lane, cand_last = Signal(), Signal(), Signal(), Signal()
        m.d.sync += cand_valid.eq(0)

        def candidate(value, value_index, beat, last):
            lane = beat[0]
            # the lowest index wins ties: a later logit replaces the maximum only when greater
            better = [(beat < 2) | greater_split(value, best[k], parts=4) for k in (0, 1)]
            m.d.sync += [cand.eq(value), cand_index.eq(value_index), cand_valid.eq(1),
                         cand_better.eq(Mux(lane, better[1], better[0])), cand_lane.eq(lane),
                         cand_last.eq(last)]

        taken = self.logits.valid & self.logits.ready
        if width > 1:
            tree = self._tree(m, taken, index)
        with m.If(taken):
            if width == 1:
                candidate(self.logits.payload.value, index, index, self.logits.payload.last)
            with m.If(self.logits.payload.last):
                m.d.sync += [index.eq(0), busy.eq(1)]
            with m.Else():
                m.d.sync += index.eq(index + 1)
        if width > 1:
            valid, value, offset, beat, last = tree
            with m.If(valid):
                candidate(value, Cat(offset, beat), beat, last)
        merging, marking = Signal(), Signal()
        m.d.sync += [merging.eq(cand_valid & cand_last), marking.eq(merging)]
        for k in (0, 1):
            with m.If(cand_valid & cand_better & equals(cand_lane, k)):
                m.d.sync += [best[k].eq(cand), best_index[k].eq(cand_index)]
        # the two maxima merged: the verdict (the odd lane's when greater, or equal at a lower
        # index) registered alone, with each lane's marks; the winner's index and marks picked
        # by it the cycle after
        odd = Signal()
        marks = [Signal(2, name=f"marks{k}") for k in (0, 1)]  # (step_end, eos)
        with m.If(merging):
            m.d.sync += odd.eq(greater_split(best[1], best[0])
                               | ((best[1] == best[0]) & (best_index[1] < best_index[0])))
            for k in (0, 1):
                is_delimiter = 0
                for t in self.delimiters:
                    is_delimiter = is_delimiter | equals(best_index[k], t)
                eos = equals(best_index[k], self.eos)
                m.d.sync += marks[k].eq(Cat(is_delimiter | eos, eos))
        with m.If(marking):
            mark = Mux(odd, marks[1], marks[0])
            m.d.sync += [result.token.eq(Mux(odd, best_index[1], best_index[0])),
                         result.step_end.eq(mark[0]), result.eos.eq(mark[1]), full.eq(1)]
        return m


    def _tree(self, m, taken, beat):
        """A beat's largest logit (the lower offset on ties) and its offset in the beat, by
        pairwise comparisons, a registered level a cycle; the beat's number and ``last``
        travel beside. Returns (valid, value, offset, beat, last), registered."""
        width = self._width
        values = self.logits.payload.value
        level = [(values[t], Const(t, range(width))) for t in range(width)]
        valid, last = taken, self.logits.payload.last
        depth = 0
        while len(level) > 1:
            depth += 1
            merged = []
            for k in range(0, len(level), 2):
                (a, a_offset), (b, b_offset) = level[k], level[k + 1]
                higher = greater_split(b, a, parts=4)
                value = Signal(signed(32), name=f"tree{depth}_{k // 2}", reset_less=True)
                offset = Signal(range(width), name=f"tree{depth}_{k // 2}_offset",
                                reset_less=True)
                m.d.sync += [value.eq(Mux(higher, b, a)), offset.eq(Mux(higher, b_offset,
                                                                        a_offset))]
                merged.append((value, offset))
            level = merged
            registered = Signal(name=f"tree{depth}_valid")
            beat_r = Signal(beat.shape(), name=f"tree{depth}_beat", reset_less=True)
            last_r = Signal(name=f"tree{depth}_last", reset_less=True)
            m.d.sync += [registered.eq(valid), beat_r.eq(beat), last_r.eq(last)]
            valid, beat, last = registered, beat_r, last_r
        (value, offset), = level
        return valid, value, offset, beat, last
