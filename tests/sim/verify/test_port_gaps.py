"""The testbench's port gap patterns (:mod:`heteroreason.sim.verify.tb.port_gaps`), against
counts written from their definitions."""

import random

import pytest

from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.tb.port_gaps import PortGaps, refresh_cycles


def served(gaps: PortGaps, cycles: range) -> list[int]:
    return [c for c in cycles if not gaps.skip(c)]


def test_random_gaps_draw_as_the_stress_pattern_always_did():
    """One draw a call, skipped below ``stall``: the same seed gives the same gaps as before."""
    a, b = random.Random(7), random.Random(7)
    gaps = PortGaps(0.4, pattern="random", rng=a)
    assert [gaps.skip(c) for c in range(500)] == [b.random() < 0.4 for _ in range(500)]


@pytest.mark.parametrize("stall", [0.0, 0.25, 0.605, 0.9])
def test_paced_gaps_serve_the_rate_evenly(stall):
    """Asked every cycle, a paced port serves floor(rate * n) or one more in any n cycles
    from the start, so no two windows of equal length differ by more than one beat."""
    gaps = PortGaps(stall, pattern="paced", rng=random.Random(1))
    times = served(gaps, range(4000))
    rate = 1 - stall
    for n in (1, 10, 333, 4000):
        count = sum(1 for t in times if t < n)
        assert int(rate * n) <= count <= int(rate * n) + 1, (n, count)
    window = 97
    counts = [sum(1 for t in times if s <= t < s + window) for s in range(0, 3900, 13)]
    assert max(counts) - min(counts) <= 1


def test_a_paced_port_banks_at_most_one_beat_while_idle():
    """Not asked for 1,000 cycles, it serves at most two beats back to back, then its rate."""
    gaps = PortGaps(0.5, pattern="paced", rng=random.Random(1))
    assert served(gaps, range(10)) == [1, 3, 5, 7, 9]
    burst = served(gaps, range(1000, 1010))
    assert burst[:2] == [1000, 1001] and len(burst) <= 6


def test_refreshing_ports_skip_their_busy_cycles_and_keep_their_rate():
    """Every period, ``busy`` consecutive cycles (mod the period, at the port's phase) serve
    nothing; over whole periods the port serves its rate to within a beat a period."""
    period, busy, stall = 100, 12, 0.6
    for seed in range(5):
        gaps = PortGaps(stall, pattern="paced", rng=random.Random(seed), refresh=(period, busy))
        times = served(gaps, range(50 * period))
        assert abs(len(times) - (1 - stall) * 50 * period) <= 2
        # some phase leaves busy consecutive cycles of every period unserved
        phases = [p for p in range(period)
                  if not any((t - p) % period < busy for t in times)]
        assert phases, seed
        per_period = [sum(1 for t in times if k * period <= t < (k + 1) * period)
                      for k in range(1, 50)]
        assert max(per_period) - min(per_period) <= 1


def test_refresh_cycles_at_the_u280_clock():
    """3.9 us and 350 ns at 300 MHz."""
    assert refresh_cycles(300e6) == (1170, 105)
    assert refresh_cycles(200e6) == (780, 70)


@pytest.mark.parametrize("kwargs, message", [
    (dict(stall=1.0, pattern="paced"), r"^stall must be"),
    (dict(stall=0.2, pattern="bursty"), r"^pattern must be one of random, paced, not 'bursty'$"),
    (dict(stall=0.2, pattern="random", refresh=(10, 1)),
     r"^refresh needs the paced pattern, not 'random'$"),
    (dict(stall=0.2, pattern="paced", refresh=(10, 10)), r"^refresh busy cycles must be"),
    (dict(stall=0.05, pattern="paced", refresh=(100, 10)),
     r"^a port at 0\.95 beats a cycle cannot also refresh 10 of every 100 cycles"),
])
def test_bad_gaps_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PortGaps(kwargs.pop("stall"), rng=random.Random(1), **kwargs)


def test_cycles_must_move_forward():
    gaps = PortGaps(0.5, pattern="paced", rng=random.Random(1))
    gaps.skip(5)
    with pytest.raises(ValueError, match=r"^cycle 5 is not after the last one asked, 5$"):
        gaps.skip(5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(port_gaps="even"), r"^stimulus port_gaps must be one of random, paced, not 'even'$"),
    (dict(port_gaps="random", port_refresh=(100, 5)), r"^stimulus port_refresh must be"),
    (dict(port_gaps="paced", port_refresh=(100, 100)), r"^stimulus port_refresh must be"),
    (dict(port_gaps="paced", port_refresh=(100,)), r"^stimulus port_refresh must be"),
])
def test_the_stimulus_refuses_bad_gaps(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Stimulus(**kwargs)


def test_the_stimulus_carries_the_gaps():
    s = Stimulus(port_gaps="paced", port_refresh=[1170, 105])
    assert (s.port_gaps, s.port_refresh) == ("paced", (1170, 105))
