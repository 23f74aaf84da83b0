"""Registered arithmetic for pipelines that never stall (their producers hold back by credit):
an adder tree registered every two levels, and the requantization ``sat(rshift_round(acc * mult,
shift), bits)`` of :mod:`heteroreason.model.spec.numerics.qwen2_int8` split over registered stages
sized for a 300 MHz UltraScale+ (18x18 partial products, registered twice; short carry
chains; saturation from sign-bit tests rather than wide comparators).

Each function takes the input's ``valid`` and returns the registered results with their
``valid``; the latencies are module functions, the one definition the timing model reads.
"""

from __future__ import annotations

import math

from amaranth.hdl import Cat, Const, Shape, Signal, Value, ValueCastable, signed, unsigned
from amaranth.lib import data

from heteroreason.model import checks

__all__ = [
    "GROUP_BITS",
    "KEEP",
    "MAX_FANOUT",
    "REQUANT_LATENCY",
    "Mirrored",
    "StallingPipeline",
    "delay",
    "requantize_pipelined",
    "tree_latency",
    "tree_sum_pipelined",
]

TREE_LEVELS_PER_STAGE = 2
# the attribute of a register copy that synthesis keeps apart from its twins (Yosys's opt_merge
# and Vivado's equivalent-register removal would otherwise fold the copies back into one
# register driving every unit: the long route the copy exists to avoid)
KEEP = {"keep": 1}
# the fanout bound of issue 42 (Xilinx's failfast flags nets over 10 k loads; this project holds
# its nets to 2,000): a control net that would drive more is replicated, a register copy a group
MAX_FANOUT = 2000
# bits of a wide register a replicated select or enable drives (a LUT or an enable each, with
# room under MAX_FANOUT for the copy's other loads)
GROUP_BITS = 1024
REQUANT_LATENCY = 10  # cycles from the accumulator register to the saturated result register


def tree_latency(terms: int, *, first_stage_levels: int = TREE_LEVELS_PER_STAGE) -> int:
    """Registered stages of :func:`tree_sum_pipelined` over ``terms`` terms."""
    checks.integer("terms", terms, low=1)
    if first_stage_levels not in range(1, TREE_LEVELS_PER_STAGE + 1):
        raise ValueError(f"first_stage_levels must be 1 to {TREE_LEVELS_PER_STAGE}, not "
                         f"{first_stage_levels!r}")
    levels = math.ceil(math.log2(terms)) if terms > 1 else 0
    if levels == 0:
        return 0
    return 1 + math.ceil(max(0, levels - first_stage_levels) / TREE_LEVELS_PER_STAGE)


def delay(m, value, cycles: int, *, name: str = "delayed", reset_less: bool = False,
          keep: bool = False):
    """``value`` registered ``cycles`` times (``reset_less`` for data, which needs no reset);
    a view keeps its layout. ``keep`` marks a deliberate copy of a register (one beside each
    of the units it feeds) that synthesis must not merge with its twins."""
    if not isinstance(value, data.View):
        value = Value.cast(value)
    for k in range(cycles):
        reg = Signal(value.shape(), name=f"{name}{k}", reset_less=reset_less,
                     attrs=KEEP if keep else {})
        m.d.sync += reg.eq(value)
        value = reg
    return value


class Mirrored(ValueCastable):
    """A register and ``copies`` copies of it that every assignment sets alike (kept apart in
    synthesis): a control that would reach more than :data:`GROUP_BITS` bits reaches a group's
    through its copy. As a value it is the register; :meth:`eq` assigns all of them.

    Members
    -------
    value : Signal
        The register.
    """

    def __init__(self, copies: int, *, name: str, shape=1, init: int = 0):
        checks.integer("copies", copies, low=1)
        self.value = Signal(shape, name=name, init=init)
        self._copies = [Signal(shape, name=f"{name}_copy{k}", init=init, attrs=KEEP)
                        for k in range(copies)]

    def shape(self):
        return self.value.shape()

    def as_value(self):
        return self.value

    def copy(self, index: int):
        """Copy ``index`` (of ``copies``): equal to the register every cycle."""
        return self._copies[index]

    def eq(self, value):
        """The assignments that set the register and its copies to ``value``."""
        return [s.eq(value) for s in (self.value, *self._copies)]

    def __invert__(self):
        return ~self.value

    def __and__(self, other):
        return self.value & other

    def __rand__(self, other):
        return other & self.value

    def __or__(self, other):
        return self.value | other

    def __ror__(self, other):
        return other | self.value


class StallingPipeline:
    """The control of a pipeline that stalls as a whole: ``latency`` stages advance together
    while the last is empty or its result is taken (``ready``). The caller drives ``issue``
    (a new element enters the first stage on an advance) and ``issue_tag`` (a bit that travels
    with it, such as ``last``), and registers its data with :meth:`stage`.

    The advance reaches every register of every stage: a wide pipeline's registers take it
    from copies (:meth:`enable`), each made of a kept copy of the last stage's valid flag and
    driving at most :data:`GROUP_BITS` register bits.

    Members
    -------
    advance : Signal
        The stages move this cycle (the control's own registers and the caller's few).
    issue, issue_tag : Signal
        Driven by the caller.
    """

    def __init__(self, m, latency: int, *, ready, name: str = "pipe"):
        checks.integer("latency", latency, low=1)
        self._m, self._name, self._ready = m, name, ready
        self.advance = Signal(name=f"{name}_advance")
        self.issue = Signal(name=f"{name}_issue")
        self.issue_tag = Signal(name=f"{name}_issue_tag")
        self._valid = Signal(latency, name=f"{name}_valid")
        self._tag = Signal(latency, name=f"{name}_tag")
        self._copies = []  # [advance copy, register bits it drives]
        m.d.comb += self.advance.eq(~self._valid[-1] | ready)
        with m.If(self.advance):
            m.d.sync += [self._valid.eq(Cat(self.issue, self._valid[:-1])),
                         self._tag.eq(Cat(self.issue_tag, self._tag[:-1]))]

    def enable(self, bits: int):
        """An advance for ``bits`` more register bits: the newest copy while it drives at most
        :data:`GROUP_BITS` with them, else a new copy (its own kept copy of the last stage's
        valid flag, set as the flag is, and its own ``~valid | ready``)."""
        checks.integer("bits", bits, low=1)
        if not self._copies or (self._copies[-1][1] + bits > GROUP_BITS
                                and self._copies[-1][1] > 0):
            k = len(self._copies)
            last = Signal(name=f"{self._name}_last{k}", attrs=KEEP)
            advance = Signal(name=f"{self._name}_advance{k}", attrs=KEEP)
            with self._m.If(self.advance):
                self._m.d.sync += last.eq(Cat(self.issue, self._valid)[-2])
            self._m.d.comb += advance.eq(~last | self._ready)
            self._copies.append([advance, 0])
        self._copies[-1][1] += bits
        return self._copies[-1][0]

    @property
    def out_valid(self):
        """The last stage holds a result."""
        return self._valid[-1]

    @property
    def out_tag(self):
        """The tag of the last stage's result."""
        return self._tag[-1]

    @property
    def busy(self):
        """Some stage holds an element."""
        return self._valid.any()

    def stage(self, value, name: str, shape=None):
        """``value`` registered as the stages advance (a data register, without reset; its
        enable from a copy of the advance, :meth:`enable`)."""
        reg = Signal(shape or Value.cast(value).shape(), name=name, reset_less=True)
        with self._m.If(self.enable(Shape.cast(reg.shape()).width)):
            self._m.d.sync += reg.eq(value)
        return reg


def tree_sum_pipelined(m, terms, *, name: str = "tree",
                       first_stage_levels: int = TREE_LEVELS_PER_STAGE):
    """The sum of ``terms`` as a balanced adder tree with a register after its first
    ``first_stage_levels`` levels (one, where the terms come from far: a row of multipliers)
    and then after every two (:func:`tree_latency` stages)."""
    level = [Value.cast(t) for t in terms]
    if not level:
        raise ValueError("tree_sum_pipelined needs at least one term")
    tree_latency(len(level), first_stage_levels=first_stage_levels)  # checks the levels
    depth = 0
    while len(level) > 1:
        level = [level[k] + level[k + 1] if k + 1 < len(level) else level[k]
                 for k in range(0, len(level), 2)]
        depth += 1
        past_first = depth - first_stage_levels
        if (past_first >= 0 and past_first % TREE_LEVELS_PER_STAGE == 0) or len(level) == 1:
            regs = []
            for k, value in enumerate(level):
                reg = Signal(value.shape(), name=f"{name}_l{depth}_{k}", reset_less=True)
                m.d.sync += reg.eq(value)
                regs.append(reg)
            level = regs
    return level[0]


def _all_equal_to_sign(value, low: int):
    """``value[low:]`` all ones and all zeros (two flags)."""
    high = value[low:]
    return high.all(), ~high.any()


def requantize_pipelined(m, acc, mult, shift, bits_select, *, widths=(8, 16, 32), en=None,
                         name: str = "rq"):
    """``sat(rshift_round(acc * mult, shift), widths[bits_select])`` in :data:`REQUANT_LATENCY`
    registered stages (data registers without reset, so that the multiplies' registers pack into
    the DSPs), for a signed ``acc`` of at most 48 bits, an unsigned 31-bit ``mult`` and
    a ``shift`` in 1..63 (``quant_multiplier``'s range). Returns the signed 32-bit result
    (``acc``, ``mult``, ``shift`` and ``bits_select`` must be registers of the same cycle).
    With ``en`` (a :class:`StallingPipeline`) the stages advance with the pipeline, each
    register's enable from a copy of its advance.

    Long because: its ten stages read best in order, each a few lines."""
    if len(acc) > 48 or len(mult) > 31:
        raise ValueError("requantize_pipelined takes at most a 48-bit accumulator and a "
                         "31-bit multiplier")
    a = Signal(signed(max(len(acc), 18)), name=f"{name}_a")
    m.d.comb += a.eq(acc)
    # 17-bit pieces: every partial product fits an 18x18 signed multiplier (ECP5's MULT18X18D;
    # a DSP48E2 takes 27x18); the top piece is signed
    cuts = list(range(0, len(a), 17))
    a_parts = [a[lo:lo + 17] if lo + 17 < len(a) else a[lo:].as_signed() for lo in cuts]
    m_parts = (mult[:17], mult[17:31])

    def reg(value, label, shape=None, keep=False):
        r = Signal(shape or Value.cast(value).shape(), name=f"{name}_{label}", reset_less=True,
                   attrs=KEEP if keep else {})
        if en is None:
            m.d.sync += r.eq(value)
        else:
            with m.If(en.enable(len(r))):
                m.d.sync += r.eq(value)
        return r

    # stage 1: each multiplier's own copy of its operands (its A and B registers, placed
    # beside it: one register driving six multipliers is a long route); 2-3: the partial
    # products, each registered twice (the multiplier's M and P)
    pp = {(i, j): reg(reg(reg(x, f"a{i}{j}", keep=True) * reg(y, f"b{i}{j}", keep=True),
                          f"m{i}{j}"), f"p{i}{j}")
          for i, x in enumerate(a_parts) for j, y in enumerate(m_parts)}
    # stage 4: the rows a_i * mult
    rows = [reg(pp[i, 0] + (pp[i, 1] << 17), f"s{i}",
                signed(50) if i == len(a_parts) - 1 else unsigned(49))
            for i in range(len(a_parts))]
    # stage 5: the rows above the first together; stage 6: the full product (low 17 bits:
    # row 0's)
    upper = rows[1] + (rows[2] << 17) if len(rows) == 3 else rows[1] if len(rows) == 2 else 0
    upper = reg(upper, "u", signed(68))
    low = reg(rows[0], "low", signed(50) if len(rows) == 1 else unsigned(49))
    high = Signal(signed(70), name=f"{name}_high")
    m.d.comb += high.eq(low[17:].as_signed() + upper if len(rows) == 1 else low[17:] + upper)
    full = reg(Cat(low[:17], high), "full", signed(87))
    # the shift less one (1..63 -> 0..62) and the output width travel beside the products
    amount = Signal(6, name=f"{name}_amount")
    m.d.comb += amount.eq(shift - 1)
    ctrl = reg(Cat(amount, bits_select), "c0")
    for k in range(1, 6):
        ctrl = reg(ctrl, f"c{k}")
    # stages 7-8: t = full >> (shift - 1), by eights then by ones (each a short mux tree);
    # rshift_round is then (t + 1) >> 1
    coarse = reg(full >> Cat(Const(0, 3), ctrl[3:6]), "coarse", signed(87))
    ctrl = reg(ctrl, "c6")
    t = reg(coarse >> ctrl[:3], "t", signed(87))
    bits_t = reg(ctrl[6:], "c7")
    # stage 9: does t fit in (b + 2) signed bits? and the rounded small value
    over_pos = Signal(name=f"{name}_over_pos")
    over_neg = Signal(name=f"{name}_over_neg")
    for k, width in enumerate(widths):
        ones, zeros = _all_equal_to_sign(t, width + 1)
        with m.If(bits_t == k):
            m.d.comb += [over_pos.eq(~t[-1] & ~zeros), over_neg.eq(t[-1] & ~ones)]
    small_width = max(widths) + 2
    rounded = Signal(signed(small_width + 1), name=f"{name}_rounded")
    m.d.comb += rounded.eq((t[:small_width].as_signed() + 1) >> 1)
    r = reg(rounded, "r")
    flags = reg(Cat(over_pos, over_neg), "flags")
    bits_r = reg(bits_t, "c8")
    # stage 10: saturate
    value = Signal(signed(32), name=f"{name}_value")
    for k, width in enumerate(widths):
        hi_lim, lo_lim = (1 << (width - 1)) - 1, -(1 << (width - 1))
        ones, zeros = _all_equal_to_sign(r, width - 1)
        fits = ones | zeros
        # t beyond b + 2 bits decides alone (then r holds truncated bits); else r's own range
        with m.If(bits_r == k):
            with m.If(flags[0] | (~flags[1] & ~fits & ~r[-1])):
                m.d.comb += value.eq(hi_lim)
            with m.Elif(flags[1] | (~fits & r[-1])):
                m.d.comb += value.eq(lo_lim)
            with m.Else():
                m.d.comb += value.eq(r)
    return reg(value, "out")

