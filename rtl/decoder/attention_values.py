"""The attention unit's datapath after the division (:class:`~heteroreason.rtl.decoder.
attention.Attention`'s ``pv`` module, a unit a floorplan may place in another SLR than the
scores): the probabilities, the probability-weighted sums of the value rows, the output beats.

Everything ``pv`` takes from the rest of the unit crosses its boundary registered on both
sides (:func:`~heteroreason.rtl.decoder.crossing.boundary`, :data:`~heteroreason.rtl.decoder.
crossing.BOUNDARY_LATENCY` cycles), so that ``pv`` runs as it would beside the scores, that
many cycles later; it counts its own output beats, and tells the unit its last beat is out
across the boundary the same way. With ``crossings`` its output leaves through a
:class:`~heteroreason.rtl.decoder.crossing.CrossingSender`, whose credits hold the output back.
"""

from amaranth.hdl import Cat, Const, Mux, Signal
from amaranth.lib import wiring

from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.attention_phases import (
    _ACCUMULATE,
    _B_IDLE,
    _DIVIDE,
    _EMIT,
    DIVIDE_NEXT_TO_LAST,
    EMIT_LATENCY,
    _goto,
    accumulate_latency,
)
from heteroreason.rtl.decoder.crossing import CrossingSender, boundary
from heteroreason.rtl.decoder.pipeline import (
    StallingPipeline,
    delay,
    requantize_pipelined,
    tree_sum_pipelined,
)

__all__ = ["AttentionValues"]


class AttentionValues:
    """The ``pv`` half of :class:`~heteroreason.rtl.decoder.attention.Attention` (its state:
    the attention's constructor and the job's signals ``j``)."""

    def _values(self, m, mv, j) -> None:
        """The value pass's control in ``m`` (its rows taken, its results counted, the state
        moved on), ``pv``'s datapath in ``mv`` (:meth:`_accumulate`, :meth:`_emit`), and what
        crosses between them."""
        nr = self._kv_rows
        values, valid, last = self._rows(m, j, _ACCUMULATE, "v")
        # the rows' valid flag a stage short of the products (each group of accumulators
        # registers its own copy of the last stage, :meth:`_accumulate_into`)
        arrived_next = delay(m, valid, accumulate_latency(nr) - 3, name="acc_valid")
        valid = j.state[_ACCUMULATE] & delay(m, arrived_next, 1, name="acc_valid_last")
        in_length = self._in_length(m, j, last, 0, "acc")
        # cleared on the division's last step (registered from the step before it)
        clear_next = j.state[_DIVIDE] & equals(j.step, DIVIDE_NEXT_TO_LAST)
        start = Signal(name="emit_start")  # the pass's last result: the outputs may go
        with m.If(valid):
            self._wrote(m, j)
            with m.If(j.done):
                m.d.comb += start.eq(1)
                m.d.sync += _goto(j, _ACCUMULATE, _EMIT)

        # pv's whole input, registered on both sides of the boundary
        def cross(value, name, *, flag=False):
            return boundary(m, mv, value, f"pv_{name}", reset_less=not flag)

        pv = {
            "values": [cross(values[r], f"value{r}") for r in range(nr)],
            "in_length": cross(Cat(*in_length), "in_length", flag=True),
            "e": cross(j.e_rd.data, "e"),
            "quotient": cross(j.quotient, "quotient"),
            "clear_next": cross(clear_next, "clear_next", flag=True),
            "arrived_next": cross(arrived_next, "arrived_next", flag=True),
            "accumulating": cross(j.state[_ACCUMULATE], "accumulating", flag=True),
            "start": cross(start, "emit_start", flag=True),
            "out_mult": cross(j.job.out_mult, "out_mult"),
            "out_shift": cross(j.job.out_shift, "out_shift"),
        }
        self._accumulate(mv, j, pv)
        done = self._emit(mv, j, pv)
        # the last beat out, back across the boundary: the stage is free for the next job
        with m.If(boundary(mv, m, done, "pv_emit_done", reset_less=False)):
            m.d.sync += _goto(j, _EMIT, _B_IDLE)

    def _accumulate(self, mv, j, pv) -> None:
        """The probability-weighted sum of the value rows in ``mv``: each row's probabilities
        ``(e * recip + 2**29) >> 30`` from three registered partial products, then
        ``heads * head_dim`` registered MACs a row (:data:`ACCUMULATE_LATENCY`). With several
        rows a cycle, a row past the job's length enters as zeros, and each accumulator takes
        the sum of the cycle's products from a registered adder tree
        (:func:`accumulate_latency`). ``pv``: the inputs as they crossed the boundary."""
        hd, nr = self._head_dim, self._kv_rows
        # the exponentials were read with the rows; stage 2: registered beside the multipliers
        # (the quotients too: final since the division's last step, a cycle before)
        e = delay(mv, pv["e"], 1, name="acc_e", reset_less=True)
        quotients = delay(mv, pv["quotient"], 1, name="acc_quotient", reset_less=True)
        rows = []
        for r in range(nr):
            # a row past the length: zeros (its products add nothing)
            value = pv["values"][r]
            first = Signal.like(value, name=f"acc_value{r}_", reset_less=True)
            mv.d.sync += first.eq(Mux(pv["in_length"][r], value, 0) if nr > 1 else value)
            rows.append(delay(mv, first, 4, name=f"acc_value{r}_d", reset_less=True))
        probs = [[None] * self._heads for _ in range(nr)]
        for r in range(nr):
            for h in range(self._heads):
                q = quotients[h]
                # stages 3-4: the partial products (M, P); 5: two sums; 6: the probability
                pp = [delay(mv, e[r][h].as_unsigned()[:16] * q[lo:hi], 2,
                            name=f"pp{h}_{r}_{lo}_", reset_less=True)
                      for lo, hi in ((0, 17), (17, 34), (34, 47))]
                low = delay(mv, pp[0] + (pp[1] << 17), 1, name=f"pp_low{h}_{r}_",
                            reset_less=True)
                high = delay(mv, Cat(Const(1 << 29, 34), pp[2]), 1, name=f"pp_high{h}_{r}_",
                             reset_less=True)
                probs[r][h] = delay(mv, (low + high)[30:47], 1, name=f"prob{h}_{r}_",
                                    reset_less=True)
        sums = []
        for h in range(self._heads):
            for i in range(hd):
                terms = []
                for r in range(nr):
                    # 7: the probability copied beside each MAC (its A register: one register
                    # driving every lane is a long route); 8-9: the product (M, P)
                    prob_i = delay(mv, probs[r][h], 1, name=f"prob{h}_{r}_{i}_",
                                   reset_less=True, keep=True)
                    terms.append(delay(mv, prob_i * rows[r][i], 2, name=f"pv{h}_{r}_{i}_",
                                       reset_less=True))
                # the cycle's products summed (a registered tree), then the accumulator
                sums.append(terms[0] if nr == 1 else
                            tree_sum_pipelined(mv, terms, name=f"pv_sum{h}_{i}"))
        self._accumulate_into(mv, j, sums, clear_next=pv["clear_next"],
                              arrived_next=pv["arrived_next"], accumulating=pv["accumulating"])

    def _emit(self, mv, j, pv):
        """The requantized outputs, ``width`` a beat, through a pipeline that stalls with
        ``out`` (:data:`EMIT_LATENCY`), from the cycle after ``pv["start"]``; returns the
        pulse of the last beat taken."""
        width = self._width
        beats = self._heads * self._head_dim // width
        issuing = Signal(name="emit_issuing")
        beat = Signal(range(beats), name="emit_beat")
        if self._crossings:
            mv.submodules.out_tx = tx = CrossingSender(shape=self.out.signature.payload_shape)
            wiring.connect(mv, tx.link, wiring.flipped(self.out))
            out = tx.stream
        else:
            out = self.out
        pipe = StallingPipeline(mv, EMIT_LATENCY, ready=out.ready, name="emit")
        last = equals(beat, beats - 1)
        mv.d.comb += [pipe.issue.eq(issuing), pipe.issue_tag.eq(last)]
        with mv.If(pv["start"]):
            mv.d.sync += [issuing.eq(1), beat.eq(0)]
        with mv.If(issuing & pipe.advance):
            mv.d.sync += beat.eq(beat + 1)
            with mv.If(last):
                mv.d.sync += issuing.eq(0)
        chunk = pipe.stage(self._emit_select(mv, j, issuing & pipe.advance,
                                             first=pv["accumulating"]), "emit_chunk")
        # the job's output scale, copied beside the requantizers (set at the hand-over)
        mult = delay(mv, pv["out_mult"], 1, name="out_mult", reset_less=True)
        shift = delay(mv, pv["out_shift"], 1, name="out_shift", reset_less=True)
        for k in range(width):
            mv.d.comb += out.payload.value[k].eq(requantize_pipelined(
                mv, chunk[32 * k:32 * (k + 1)].as_signed(), mult, shift,
                Const(0, 2), widths=(8,), en=pipe, name=f"out{k}"))
        mv.d.comb += [out.valid.eq(pipe.out_valid), out.payload.last.eq(pipe.out_tag)]
        return out.valid & out.ready & out.payload.last
