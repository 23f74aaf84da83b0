"""The fleet's workload: problems arriving over time, each a problem trace drawn from trace
sets (mixed by weight).

Arrivals are Poisson (exponential gaps), bursty (gamma gaps with a coefficient of variation
``cv``: 1 is Poisson, above 1 burstier) or the timestamps of an arrival trace (one time in
seconds per line, non-decreasing; ``#`` starts a comment). Every draw comes from one
``random.Random(seed)``: the same seed gives the same problems at the same times on any machine.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from heteroreason.model import checks
from heteroreason.model.files import InputError, read_text
from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.limits import CV, MAX_ARRIVAL_S, RATE_PER_S
from heteroreason.model.workload.traces import ProblemTrace

__all__ = ["ArrivalKind", "Arrivals", "Workload", "arrival_times_ms", "load_arrival_trace",
           "sample_workload"]


class ArrivalKind(str, enum.Enum):
    POISSON = "poisson"
    GAMMA = "gamma"
    TRACE = "trace"


@dataclass(frozen=True)
class Arrivals:
    """How problems arrive: ``rate_per_s`` on average (Poisson, gamma), gamma gaps of
    coefficient of variation ``cv``, or recorded ``timestamps_s``."""

    kind: ArrivalKind
    rate_per_s: float = 0.0
    cv: float = 1.0
    timestamps_s: tuple[float, ...] = ()

    def __post_init__(self):
        if self.kind is ArrivalKind.TRACE:
            if not self.timestamps_s:
                raise ValueError("an arrival trace needs at least one timestamp")
            previous = 0.0
            for i, t in enumerate(self.timestamps_s):  # as load_arrival_trace checks a file
                checks.number(f"arrival timestamps_s[{i}]", t, low=0, high=MAX_ARRIVAL_S,
                              note="seconds: the simulator keeps microseconds up to there")
                if t < previous:
                    raise ValueError(f"arrival timestamps_s[{i}] ({t}) is before the previous "
                                     f"one ({previous}): times must not decrease")
                previous = t
            object.__setattr__(self, "timestamps_s", tuple(self.timestamps_s))
            return
        checks.number("arrival rate_per_s", self.rate_per_s, low=RATE_PER_S[0],
                      high=RATE_PER_S[1], note="arrivals per second")
        checks.number("arrival cv", self.cv, low=CV[0], high=CV[1],
                      note="the gaps' coefficient of variation")

    @classmethod
    def poisson(cls, rate_per_s: float) -> Arrivals:
        return cls(ArrivalKind.POISSON, rate_per_s)

    @classmethod
    def gamma(cls, rate_per_s: float, cv: float) -> Arrivals:
        return cls(ArrivalKind.GAMMA, rate_per_s, cv)


def arrival_times_ms(arrivals: Arrivals, count: int, rng: random.Random) -> list[float]:
    """``count`` arrival times from 0 (a trace: its first ``count`` timestamps, from its first)."""
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count!r}")
    if arrivals.kind is ArrivalKind.TRACE:
        stamps = arrivals.timestamps_s
        if count > len(stamps):
            raise FleetError(f"the arrival trace has {len(stamps)} arrival times, fewer than "
                             f"the {count} problems asked (--problems)")
        return [1e3 * (t - stamps[0]) for t in stamps[:count]]
    mean_s = 1.0 / arrivals.rate_per_s
    times, t = [], 0.0
    shape = 1.0 / arrivals.cv ** 2
    for _ in range(count):
        times.append(1e3 * t)
        if arrivals.kind is ArrivalKind.POISSON:
            t += rng.expovariate(arrivals.rate_per_s)
        else:
            t += rng.gammavariate(shape, mean_s / shape)
    return times


def load_arrival_trace(path: Path | str) -> Arrivals:
    """An arrival trace: one time in seconds per line, non-decreasing."""
    path = Path(path)
    stamps: list[float] = []
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            value = float(text)
        except ValueError:
            raise InputError(f"{path}:{number}", f"arrival time {text!r} is not a number "
                             "(seconds)") from None
        if not math.isfinite(value) or not 0 <= value <= MAX_ARRIVAL_S:
            raise InputError(f"{path}:{number}", f"arrival time {value!r} must be a number in "
                             f"[0, {MAX_ARRIVAL_S:g}] (seconds: the simulator keeps "
                             "microseconds up to there)")
        if stamps and value < stamps[-1]:
            raise InputError(f"{path}:{number}", f"arrival time {value} is before the previous "
                             f"one ({stamps[-1]}): times must not decrease")
        stamps.append(value)
    if not stamps:
        raise InputError(str(path), "no arrival times")
    return Arrivals(ArrivalKind.TRACE, timestamps_s=tuple(stamps))


@dataclass(frozen=True)
class Workload:
    """Trace sets to draw problems from, with the weight of each."""

    traces: Mapping[str, Sequence[ProblemTrace]]
    weights: Mapping[str, float]

    def __post_init__(self):
        if not self.traces:
            raise ValueError("a workload needs at least one trace set")
        for name, items in self.traces.items():
            if not items:
                raise ValueError(f"trace set {name!r} is empty")
            if name not in self.weights:
                raise ValueError(f"trace set {name!r} has no weight")
        for name, w in self.weights.items():
            if name not in self.traces:
                raise ValueError(f"weight for {name!r}, which is not a trace set")
            checks.number(f"weight of {name!r}", w, low=0, low_open=True)

    @classmethod
    def single(cls, name: str, traces: Sequence[ProblemTrace]) -> Workload:
        return cls({name: tuple(traces)}, {name: 1.0})


def sample_workload(workload: Workload, arrivals: Arrivals, count: int,
                    seed: int) -> tuple[list[ProblemTrace], list[float]]:
    """``count`` problems (a trace set by weight, then a trace uniformly) and their arrival
    times in ms."""
    rng = random.Random(seed)
    times = arrival_times_ms(arrivals, count, rng)
    names = sorted(workload.traces)
    weights = [workload.weights[n] for n in names]
    sets = [workload.traces[n] for n in names]
    problems = []
    for _ in range(count):
        k = rng.choices(range(len(names)), weights)[0] if len(names) > 1 else 0
        problems.append(sets[k][rng.randrange(len(sets[k]))])
    return problems, times
