"""A sampler per token of a pass: the logits of several contexts' tokens, side by side, to an
argmax each; each kept token's sample out in turn, with its context id."""

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.sampler import ArgmaxSampler, latency
from heteroreason.rtl.limits import CONTEXT_LIMIT, MULTIPLE_LIMIT

__all__ = ["PassSampler"]


class PassSampler(wiring.Component):
    """``tokens`` :class:`~heteroreason.rtl.decoder.sampler.ArgmaxSampler`\\ s behind one logit
    stream: beat ``b`` carries ``width`` logits of each token of the pass, token-major (the
    matrix-vector unit's results with ``vectors`` = ``tokens``). The tokens that keep their
    logits (``keep``, one bit a token) and their contexts (``ctx``) are read with the first
    beat of the logits; each kept token's sample leaves on ``token``, lowest token first, with
    its context id; the other tokens' samples are dropped.

    Parameters
    ----------
    vocab, delimiters, eos, width
        As :class:`~heteroreason.rtl.decoder.sampler.ArgmaxSampler`'s.
    tokens : int
        Tokens a pass (samplers), 2 to ``MULTIPLE_LIMIT``.
    contexts : int
        Context ids, 2 to ``CONTEXT_LIMIT``.

    Members
    -------
    logits : In(stream.Signature(StructLayout value ArrayLayout(signed(32), tokens * width),
        last))
        Ready while every sampler is idle: from the last beat until every kept sample is taken
        it is not.
    keep : In(tokens)
    ctx : In(ArrayLayout(range(contexts), tokens))
    token : Out(stream.Signature(StructLayout token, step_end, eos, ctx))

    Latency
    -------
    The first kept sample is offered :func:`~heteroreason.rtl.decoder.sampler.latency`
    (``width``) cycles after the last beat; each later one a cycle after the one before is
    taken.

    Throughput
    ----------
    ``tokens * width`` logits per cycle.
    """

    def __init__(self, *, vocab, delimiters=(), eos=0, width=1, tokens, contexts):
        checks.integer("tokens", tokens, low=2, high=MULTIPLE_LIMIT, error=TypeError)
        checks.integer("contexts", contexts, low=2, high=CONTEXT_LIMIT, error=TypeError)
        self._samplers = [ArgmaxSampler(vocab=vocab, delimiters=delimiters, eos=eos,
                                        width=width) for _ in range(tokens)]
        self._tokens, self._width = tokens, width
        super().__init__({
            "logits": In(stream.Signature(data.StructLayout({
                "value": data.ArrayLayout(signed(32), tokens * width), "last": 1}))),
            "keep": In(tokens),
            "ctx": In(data.ArrayLayout(range(contexts), tokens)),
            "token": Out(stream.Signature(data.StructLayout({
                "token": range(vocab), "step_end": 1, "eos": 1, "ctx": range(contexts)}))),
        })

    @property
    def latency(self) -> int:
        return latency(self._width)

    def elaborate(self, platform):
        m = Module()
        n, width = self._tokens, self._width
        first = Signal(init=1)  # the next beat is a job's first
        pending = Signal(n)  # kept samples not yet out
        ctx = Signal(self.ctx.shape())
        taken = self.logits.valid & self.logits.ready
        with m.If(taken):
            m.d.sync += first.eq(self.logits.payload.last)
            with m.If(first):
                m.d.sync += [pending.eq(self.keep), ctx.eq(self.ctx)]
        ready = 1
        for b, sampler in enumerate(self._samplers):
            m.submodules[f"sampler{b}"] = sampler
            ready = ready & sampler.logits.ready
            value = self.logits.payload.value.as_value()[b * 32 * width:(b + 1) * 32 * width]
            m.d.comb += [sampler.logits.valid.eq(self.logits.valid & self.logits.ready),
                         sampler.logits.payload.value.eq(value),
                         sampler.logits.payload.last.eq(self.logits.payload.last)]
        m.d.comb += self.logits.ready.eq(ready)
        # the lowest pending token's sample; a dropped token's sampler is emptied at once
        chosen = Signal(range(n), name="chosen")
        for b in reversed(range(n)):
            with m.If(pending[b]):
                m.d.comb += chosen.eq(b)
        out = self.token
        for b, sampler in enumerate(self._samplers):
            mine = pending[b] & equals(chosen, b)
            m.d.comb += sampler.token.ready.eq(~pending[b] | (mine & out.ready))
            with m.If(mine):
                m.d.comb += [out.valid.eq(sampler.token.valid),
                             out.payload.token.eq(sampler.token.payload.token),
                             out.payload.step_end.eq(sampler.token.payload.step_end),
                             out.payload.eos.eq(sampler.token.payload.eos),
                             out.payload.ctx.eq(ctx[b])]
            with m.If(mine & out.ready & sampler.token.valid):
                m.d.sync += pending[b].eq(0)
        return m
