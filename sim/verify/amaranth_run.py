"""Running an Amaranth simulation until its testbenches have seen everything, within a bound."""

from __future__ import annotations

from collections.abc import Callable

from heteroreason.model import checks

__all__ = ["run_until_done"]


def run_until_done(sim, done: Callable[[], bool], *, clock_period_s: float, max_cycles: int,
                   chunk_cycles: int = 500) -> int:
    """Advance ``sim`` ``chunk_cycles`` at a time until ``done()`` or ``max_cycles``; returns the
    cycles simulated. A hung design stops at the bound (the caller's checks then fail), a
    finished one costs no idle cycles beyond its last chunk."""
    for name, value in (("max_cycles", max_cycles), ("chunk_cycles", chunk_cycles)):
        checks.integer(name, value, low=1)
    cycles = 0
    while cycles < max_cycles and not done():
        cycles = min(cycles + chunk_cycles, max_cycles)
        sim.run_until(clock_period_s * cycles)
    return cycles
