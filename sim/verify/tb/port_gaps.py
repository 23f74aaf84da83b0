"""When a port of the testbench's HBM model moves nothing: the pattern of a port's gaps.

A port whose bandwidth is below a beat a cycle skips the share ``stall`` of its cycles. How the
skipped cycles fall decides what a design's per-port FIFOs must absorb:

``random``
    each cycle skipped with probability ``stall``, independently (the stress pattern every
    bit-exactness test uses: runs of gaps of any length). Over a token the ports' counts drift
    apart as random walks, and a beat that needs a slice from every port waits for the slowest:
    with 32 ports that costs a few per cent whatever the FIFO depth.
``paced``
    the port moves a beat whenever its rate ``1 - stall`` has accrued one (a memory controller
    that streams at its sustained rate), at most one beat banked while it has nothing to move;
    with ``refresh`` (``period`` and ``busy`` cycles) it also moves nothing for ``busy`` cycles
    of every ``period``, at a phase of its own (a pseudo-channel's refresh), and paces the rest
    faster so that its mean rate is still ``1 - stall``.
"""

from __future__ import annotations

import math
import random

from heteroreason.model import checks

__all__ = ["GAP_PATTERNS", "HBM_REFRESH_S", "PortGaps", "refresh_cycles"]

GAP_PATTERNS = ("random", "paced")

# (interval, busy) in seconds: an all-bank refresh of an 8 Gb DRAM die, tRFC 350 ns every tREFI
# 3.9 us (the figures 8 Gb DDR3 data sheets give at 85-95 C, e.g. SK hynix HMT112U7BFR8C's
# refresh table; a claim for the U280's HBM2 dies, whose JESD235 timings are not read here).
# It costs 9 % of a pseudo-channel's time, of the order of the 8 % its efficiency loses (425 of
# 460 GB/s), which the ports' rate already includes.
HBM_REFRESH_S = (3.9e-6, 350e-9)


def refresh_cycles(clock_hz: float) -> tuple[int, int]:
    """:data:`HBM_REFRESH_S` in cycles of ``clock_hz`` (the busy cycles rounded up)."""
    checks.number("clock_hz", clock_hz, low=1.0)
    interval, busy = HBM_REFRESH_S
    # rounded to 1e-9 cycles first: 350 ns at 300 MHz is 105 cycles, not 105.00000000000001
    return round(interval * clock_hz), math.ceil(round(busy * clock_hz, 9))


def _blackout_before(n: int, period: int, busy: int) -> int:
    """Busy cycles among shifted cycles ``[0, n)``."""
    return (n // period) * busy + min(n % period, busy)


class PortGaps:
    """One port's gaps: :meth:`skip` says whether the port moves nothing at ``cycle``.

    Parameters
    ----------
    stall : float
        The share of cycles skipped, in [0, 1).
    pattern : str
        ``"random"`` or ``"paced"`` (see the module's docstring).
    rng : random.Random
        The testbench's generator (``random`` draws from it at every call; ``paced`` draws once,
        for its refresh phase).
    refresh : tuple of int, optional
        With ``paced``: ``(period, busy)`` cycles; ``busy`` in [0, period).
    """

    def __init__(self, stall: float, *, pattern: str, rng: random.Random,
                 refresh: tuple[int, int] = ()):
        checks.number("stall", stall, low=0, high=1, high_open=True)
        if pattern not in GAP_PATTERNS:
            raise ValueError(f"pattern must be one of {', '.join(GAP_PATTERNS)}, not "
                             f"{pattern!r}")
        self.stall, self.pattern, self._rng = stall, pattern, rng
        self._period, self._busy, self._phase = 1, 0, 0
        if refresh:
            if pattern != "paced":
                raise ValueError(f"refresh needs the paced pattern, not {pattern!r}")
            period, busy = refresh
            checks.integer("refresh period", period, low=1)
            checks.integer("refresh busy cycles", busy, low=0, high=period - 1)
            self._period, self._busy = period, busy
            self._phase = rng.randrange(period)
        self.rate = (1.0 - stall) * self._period / (self._period - self._busy)
        if self.rate > 1.0:
            raise ValueError(f"a port at {1.0 - stall:.4g} beats a cycle cannot also refresh "
                             f"{self._busy} of every {self._period} cycles (it would need "
                             f"{self.rate:.4g} beats a cycle between refreshes)")
        self._credit = 0.0
        self._last = -1

    def _active(self, first: int, end: int) -> int:
        """Cycles in ``[first, end)`` outside the refreshes."""
        a, b = first + self._phase, end + self._phase
        return (end - first) - (_blackout_before(b, self._period, self._busy)
                                - _blackout_before(a, self._period, self._busy))

    def skip(self, cycle: int) -> bool:
        if self.pattern == "random":
            return self._rng.random() < self.stall
        if cycle <= self._last:
            raise ValueError(f"cycle {cycle} is not after the last one asked, {self._last}")
        active = self._active(self._last + 1, cycle + 1)
        self._last = cycle
        self._credit = min(self._credit + self.rate * active, 1.0 + self.rate)
        if self._active(cycle, cycle + 1) == 0 or self._credit < 1.0:
            return True
        self._credit -= 1.0
        return False
