"""Greedy sampler: a running argmax over the LM head's int32 logits, so logits are never stored."""

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.rtl.compare import equals

__all__ = ["ArgmaxSampler"]


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
    The token is offered two cycles after the last logit (the winner, then its marks).

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
        best = Signal(signed(32))
        best_index = Signal(range(self.vocab))
        full = Signal()
        marking = Signal()
        result = Signal(self.token.payload.shape())
        m.d.comb += [self.token.valid.eq(full), self.logits.ready.eq(~full & ~marking),
                     self.token.payload.eq(result)]
        with m.If(self.token.valid & self.token.ready):
            m.d.sync += full.eq(0)
        # the marks of the winner a cycle after it is known (the comparison chain and the
        # equality tests would be one long path)
        m.d.sync += marking.eq(0)
        with m.If(marking):
            is_delimiter = 0
            for t in self.delimiters:
                is_delimiter = is_delimiter | equals(result.token, t)
            eos = equals(result.token, self.eos)
            m.d.sync += [result.step_end.eq(is_delimiter | eos), result.eos.eq(eos),
                         full.eq(1)]
        with m.If(self.logits.valid & self.logits.ready):
            value = self.logits.payload.value
            first = index == 0
            # value > best from two 16-bit halves compared side by side (two short carry chains
            # instead of one of 32 bits: the running maximum cannot be pipelined)
            high_greater = value[16:].as_signed() > best[16:].as_signed()
            high_equal = value[16:] == best[16:]
            low_greater = value[:16] > best[:16]
            better = first | high_greater | (high_equal & low_greater)
            winner = Signal(range(self.vocab))
            m.d.comb += winner.eq(best_index)
            with m.If(better):
                m.d.comb += winner.eq(index)
                m.d.sync += [best.eq(value), best_index.eq(index)]
            with m.If(self.logits.payload.last):
                m.d.sync += [marking.eq(1), index.eq(0), result.token.eq(winner)]
            with m.Else():
                m.d.sync += index.eq(index + 1)
        return m
