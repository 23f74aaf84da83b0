"""A pass that drafts for several problems at once: the MultiDraftEngine's (rtl/multi_engine.py,
docs/design.md §4.7). A pass of B tokens, each of another context at its own position, is
priced with the RTL-calibrated timing model's pass
(:meth:`~heteroreason.model.timing.fpga.core_cycles.CoreTiming.contexts_pass_cycles`) on the
board's design built with B vectors a weight beat (:func:`~.platform.design_for` with
``ingest_batch`` B: two vectors a DSP slice, a scratchpad bank a token, a sampler a token). The
pass uses the calibration's single-token overheads: within 0.5 % of the RTL's passes on
test-tiny (Amaranth) and 0.71 % on test-small at four a pass (Verilator,
tests/sim/verify/test_contexts_timing_cocotb.py).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config, qwen2_config
from heteroreason.model.timing.fpga.core_cycles import cycles_to_ms
from heteroreason.model.timing.fpga.platform import (
    _committed_calibration,
    core_timing,
    design_for,
    draft_ms_per_token,
    fpga_board,
)

__all__ = ["ESTIMATE", "MOST_A_PASS", "PassCost", "PassTable", "contexts_pass_ms", "pass_costs",
           "pass_table"]

# the most contexts a pass priced: the designs' vectors a beat the search builds for it
MOST_A_PASS = 8
ESTIMATE = ("the MultiDraftEngine's pass, calibrated: within 0.71 % of its RTL on test-small "
            "on Verilator; the full-size pass is the model's")


def _design_batch(contexts: int) -> int:
    """The smallest power of two that holds ``contexts`` tokens a pass (the designs' B)."""
    batch = 1
    while batch < contexts:
        batch *= 2
    return batch


def contexts_pass_ms(model: str | Qwen2Config, board: str, positions: Sequence[int], *,
                     per_pass: int | None = None) -> float:
    """Milliseconds of one pass drafting a token for each context at ``positions`` on the
    board's design built for ``per_pass`` drafts a pass (a power of two; None: the fewest that
    hold them); an estimate: see the module."""
    config = qwen2_config(model) if isinstance(model, str) else model
    spec = fpga_board(board)
    checks.integer("contexts a pass", len(positions), low=1, high=per_pass or MOST_A_PASS)
    if per_pass is not None:
        checks.power_of_two("per_pass", per_pass, high=MOST_A_PASS)
    calibration = _committed_calibration()
    params = design_for(config, spec, calibration=calibration,
                        ingest_batch=per_pass or _design_batch(len(positions)))
    timing = core_timing(config, spec, params, calibration.overheads)
    return cycles_to_ms(timing.contexts_pass_cycles(positions), spec.clock_hz)


@dataclass(frozen=True)
class PassCost:
    """A pass of ``contexts`` drafts, every context at ``context``, on ``board``: its
    milliseconds against one token of the board's own design (one context a pass, as built:
    ``token_ms``) and against one context a pass on the design built for the pass
    (``same_design_token_ms``; the same as ``token_ms`` for a pass of one)."""

    board: str
    contexts: int
    context: int
    pass_ms: float
    token_ms: float
    same_design_token_ms: float | None = None

    @property
    def ratio(self) -> float:
        """The pass's cost in single-context tokens (B for no gain; 1 for B tokens free)."""
        return self.pass_ms / self.token_ms

    @property
    def same_design_ratio(self) -> float:
        """The pass's cost in single-context tokens of the design that drafts it."""
        return self.pass_ms / (self.same_design_token_ms or self.token_ms)

    @property
    def tokens_per_s(self) -> float:
        return 1e3 * self.contexts / self.pass_ms


def pass_costs(model: str | Qwen2Config, boards: Sequence[str], contexts: Sequence[int],
               positions: Sequence[int]) -> list[PassCost]:
    """Every board x contexts a pass x context: the pass against the board's single token and
    against a single context on the pass's own design."""
    config = qwen2_config(model) if isinstance(model, str) else model
    out = []
    for board in boards:
        for context in positions:
            token = draft_ms_per_token(config, board, context)
            for n in contexts:
                design = _design_batch(n)
                out.append(PassCost(board, n, context,
                                    contexts_pass_ms(config, board, [context] * n), token,
                                    contexts_pass_ms(config, board, [context],
                                                     per_pass=design)))
    return out


# the spacing of a pass table's positions (the model's cost is close to linear between them)
TABLE_STEP = 512


@dataclass(frozen=True)
class PassTable:
    """A board's pass of 1 to ``per_pass`` drafts, tabulated for a simulator: ``ms[n - 1][g]``
    is a pass of ``n`` contexts all at position ``positions[g]``. :meth:`ms_at` prices ``n``
    contexts whose positions sum to ``positions_sum`` as ``n`` at their mean (each token's
    attention is linear in its context), interpolated linearly between the positions."""

    board: str
    per_pass: int
    positions: tuple[int, ...]
    ms: tuple[tuple[float, ...], ...]

    def ms_at(self, n: int, positions_sum: int) -> float:
        if not 1 <= n <= self.per_pass:
            raise ValueError(f"{self.board}: a pass of {n} contexts; the design drafts 1 to "
                             f"{self.per_pass} a pass")
        mean = positions_sum / n
        row, xs = self.ms[n - 1], self.positions
        if not 0 <= mean <= xs[-1]:
            raise ValueError(f"{self.board}: contexts at position {mean:g} on average, beyond "
                             f"the model's context [0, {xs[-1]}]")
        g = min(bisect.bisect_right(xs, mean), len(xs) - 1)
        x0, x1 = xs[g - 1], xs[g]
        return row[g - 1] + (row[g] - row[g - 1]) * (mean - x0) / (x1 - x0)


@functools.cache
def pass_table(model: str, board: str, per_pass: int) -> PassTable:
    """:class:`PassTable` of the board's design built for ``per_pass`` drafts a pass (a power
    of two)."""
    config = qwen2_config(model)
    checks.power_of_two("per_pass", per_pass, high=MOST_A_PASS)
    last = config.max_context - 1
    positions = (*range(0, last, TABLE_STEP), last)
    ms = tuple(tuple(contexts_pass_ms(config, board, [p] * n, per_pass=per_pass)
                     for p in positions)
               for n in range(1, per_pass + 1))
    return PassTable(board, per_pass, positions, ms)
