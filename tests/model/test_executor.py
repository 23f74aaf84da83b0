"""Searches on an executor: every search advances at once, points asked for ahead are reused,
and the answers are the serial ones whichever executor ran them; errors reach the caller."""

from __future__ import annotations

import pytest

from heteroreason.model.executor import Ask, drive, executor, run_searches
from heteroreason.model.fleet.search import FleetPoint, capacities, capacity

SEED = 20261205


def _square(x: int) -> int:
    return x * x


def _guessing_search(target: int, limit: int = 64):
    """Find the least n whose square reaches ``target`` by doubling, then bisection; it names
    as ahead the next doubling and both halves (some guesses wrong), and records what it saw."""
    seen = []
    n = 1
    value = yield Ask(n, (2, 4))
    seen.append((n, value))
    while value < target:
        n *= 2
        if n > limit:
            raise ValueError(f"no n up to {limit} reaches {target}")
        value = yield Ask(n, (2 * n, 4 * n, n + 1))
        seen.append((n, value))
    lo, hi = n // 2, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        value = yield Ask(mid, ((lo + mid) // 2, (mid + hi) // 2))
        seen.append((mid, value))
        lo, hi = (mid, hi) if value < target else (lo, mid)
    return hi, tuple(seen)


def _naive_least_root(target: int) -> int:
    n = 1
    while n * n < target:
        n += 1
    return n


@pytest.mark.parametrize("target", [1, 2, 17, 50, 1000, 4095])
def test_a_search_driven_here_finds_what_the_spec_says(target):
    answer, seen = drive(_guessing_search(target), _square)
    assert answer == _naive_least_root(target)
    assert all(value == n * n for n, value in seen)


def test_searches_give_the_serial_answers_on_dask():
    pytest.importorskip("distributed")
    targets = [1, 3, 17, 50, 999, 1000, 4095, 2, 64]
    with executor() as serial:
        expected = run_searches(serial, _square, [_guessing_search(t) for t in targets])
    progress = []
    with executor(workers=2, progress=lambda done, total: progress.append((done, total))) as ex:
        got = run_searches(ex, _square, [_guessing_search(t) for t in targets])
    assert got == expected
    assert [a for a, _ in got] == [_naive_least_root(t) for t in targets]
    assert progress[0] == (0, len(targets)) and progress[-1] == (len(targets), len(targets))
    assert [d for d, _ in progress] == sorted(d for d, _ in progress)


def test_a_failing_search_fails_the_run_on_either_executor():
    searches = lambda: [_guessing_search(10), _guessing_search(10 ** 6, limit=8)]  # noqa: E731
    with executor() as serial, pytest.raises(ValueError, match="no n up to 8"):
        run_searches(serial, _square, searches())
    pytest.importorskip("distributed")
    with executor(workers=2) as ex, pytest.raises(ValueError, match="no n up to 8"):
        run_searches(ex, _square, searches())


def test_capacity_searches_on_dask_equal_the_serial_ones():
    pytest.importorskip("distributed")
    points = [FleetPoint(problems=40, seed=SEED, drafts=d, datasets=("gsm8k",)) for d in (1, 2)]
    expected = [capacity(p, 30.0).as_dict() for p in points]
    with executor(workers=2) as ex:
        got = capacities(ex, points, 30.0)
    assert repr(got) == repr(expected), f"seed {SEED}"
