"""The attention unit's replicated controls (:class:`~heteroreason.rtl.decoder.attention.
Attention`): the accumulators' clear and add, and the output beat's select, each a register
copy a group of :data:`~heteroreason.rtl.decoder.pipeline.GROUP_BITS` bits (kept apart in
synthesis), so that no control net reaches every accumulator (at full width, 28,672 bits)."""

from amaranth.hdl import Signal, Value

from heteroreason.rtl.decoder.pipeline import GROUP_BITS, KEEP

__all__ = ["ACC_BITS", "AttentionControls"]

ACC_BITS = 32  # an accumulator's bits
_SELECT_BITS = GROUP_BITS // 4  # bits of an output beat a copy of its beat counter selects


class AttentionControls:
    """The replicated controls' half of :class:`~heteroreason.rtl.decoder.attention.Attention`
    (its state: the attention's constructor and the job's signals ``j``)."""

    def _accumulate_into(self, mv, j, terms, *, clear_next, arrived_next, accumulating) -> None:
        """``j.acc[k] += terms[k]`` while a row's products arrive, and every accumulator cleared
        as the division ends, each group of accumulators under copies of its own:

        * the clear, registered from ``clear_next`` (the cycle before: the division's step
          before its last);
        * the arrival, registered from ``arrived_next`` (the valid flag's delay line a stage
          before its end), ANDed with ``accumulating`` (the state's bit: a LUT a group).
        """
        per_copy = GROUP_BITS // ACC_BITS
        words = j.acc.as_value()
        for g, lo in enumerate(range(0, len(terms), per_copy)):
            hi = min(len(terms), lo + per_copy)
            clear = Signal(name=f"acc_clear{g}", attrs=KEEP)
            arrived = Signal(name=f"acc_add{g}", attrs=KEEP)
            mv.d.sync += [clear.eq(clear_next), arrived.eq(arrived_next)]
            with mv.If(clear):
                mv.d.sync += words[lo * ACC_BITS:hi * ACC_BITS].eq(0)
            with mv.If(arrived & accumulating):
                mv.d.sync += [j.acc[k].eq(j.acc[k] + terms[k]) for k in range(lo, hi)]

    def _emit_select(self, mv, j, step, *, first) -> Value:
        """The accumulators' output beat, each :data:`_SELECT_BITS` bits chosen by a copy of
        the beat counter of its own (kept apart in synthesis), stepped with it (``step``) and
        cleared before the job's first beat (``first``)."""
        chunk_bits = ACC_BITS * self._width
        beats = self._heads * self._head_dim // self._width
        words = j.acc.as_value()
        out = Signal(chunk_bits, name="emit_select")
        for s, lo in enumerate(range(0, chunk_bits, _SELECT_BITS)):
            hi = min(chunk_bits, lo + _SELECT_BITS)
            copy = Signal(range(beats + 1), name=f"emit_beat{s}", attrs=KEEP)
            with mv.If(first):
                mv.d.sync += copy.eq(0)
            with mv.If(step):
                mv.d.sync += copy.eq(copy + 1)
            with mv.Switch(copy):
                for b in range(beats):
                    with mv.Case(b):
                        mv.d.comb += out[lo:hi].eq(
                            words[b * chunk_bits + lo:b * chunk_bits + hi])
        return out
