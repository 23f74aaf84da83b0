"""Greedy sampler: a running argmax over the LM head's int32 logits, so logits are never stored."""

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.rtl.compare import equals, greater_split

__all__ = ["LATENCY", "ArgmaxSampler"]

LATENCY = 4  # the last logit taken -> the token offered


class ArgmaxSampler(wiring.Component):
    """Takes one logit per beat (vocabulary order, ``last`` on the final one) and emits the index
    of the largest; the lowest index wins ties
    (:func:`heteroreason.model.numerics.qwen2_float.greedy`).
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

    Members
    -------
    logits : In(stream.Signature(StructLayout value signed(32), last))
    token : Out(stream.Signature(StructLayout token, step_end, eos))

    Latency
    -------
    The token is offered :data:`LATENCY` cycles after the last logit: the logits go to two
    running maxima in turn (even and odd indices), each compared in one cycle and updated in
    the next, so that no comparison and update share a cycle; then the two maxima compared
    (each one's marks found beside), then the winner and its marks picked.

    Throughput
    ----------
    One logit per cycle.
    """

    def __init__(self, *, vocab, delimiters=(), eos=0):
        if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab <= 1:
            raise TypeError(f"vocab must be an integer above 1, not {vocab!r}")
        for name, ids in (("delimiters", tuple(delimiters)), ("eos", (eos,))):
            bad = [t for t in ids if isinstance(t, bool) or not isinstance(t, int)
                   or not 0 <= t < vocab]
            if bad:
                raise ValueError(f"{name} must be token ids in [0, {vocab}), not {bad[0]!r}")
        self._vocab = vocab
        self._delimiters = tuple(delimiters)
        self._eos = eos
        super().__init__({
            "logits": In(stream.Signature(data.StructLayout({"value": signed(32), "last": 1}))),
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

    def elaborate(self, platform):
        m = Module()
        index = Signal(range(self.vocab))
        busy = Signal()  # from the last logit until the token is taken
        full = Signal()
        result = Signal(self.token.payload.shape())
        m.d.comb += [self.token.valid.eq(full), self.logits.ready.eq(~busy),
                     self.token.payload.eq(result)]
        with m.If(self.token.valid & self.token.ready):
            m.d.sync += [full.eq(0), busy.eq(0)]
        best = [Signal(signed(32), name=f"best{k}") for k in (0, 1)]
        best_index = [Signal(range(self.vocab), name=f"best_index{k}") for k in (0, 1)]
        # a logit compared with its lane's maximum (the lane: its index's parity), registered
        # with the verdict; its lane's maximum updated the cycle after, before the lane's next
        # logit (two cycles later at the earliest) is compared
        cand, cand_index = Signal(signed(32)), Signal(range(self.vocab))
        cand_valid, cand_better, cand_lane, cand_last = Signal(), Signal(), Signal(), Signal()
        m.d.sync += cand_valid.eq(0)
        with m.If(self.logits.valid & self.logits.ready):
            value, lane = self.logits.payload.value, index[0]
            # the lowest index wins ties: a later logit replaces the maximum only when greater
            better = [(index < 2) | greater_split(value, best[k], parts=4) for k in (0, 1)]
            m.d.sync += [cand.eq(value), cand_index.eq(index), cand_valid.eq(1),
                         cand_better.eq(Mux(lane, better[1], better[0])), cand_lane.eq(lane),
                         cand_last.eq(self.logits.payload.last)]
            with m.If(self.logits.payload.last):
                m.d.sync += [index.eq(0), busy.eq(1)]
            with m.Else():
                m.d.sync += index.eq(index + 1)
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

