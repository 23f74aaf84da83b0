"""The bounds of an arrival process, one definition for the fleet's models and its command line
(kept apart so that the command line reads them without importing the models).

Times are float milliseconds. Within these bounds 1e6 problems arrive within 1e10 s (1e13 ms),
where a double still keeps a few microseconds, and a gamma gap stays a number.
"""

# arrivals per second, and the gaps' coefficient of variation (gamma arrivals)
RATE_PER_S = (1e-4, 1e4)
CV = (1e-3, 10.0)
# the latest arrival a trace may hold: up to 1e9 s (1e12 ms, 32 years) a double keeps better
# than a microsecond
MAX_ARRIVAL_S = 1e9

# devices a pool holds, problems a run draws (a fleet of 1e6 problems is minutes of simulation
# on one core), and a latency SLO in seconds (up to a day; a capacity search holds ten SLOs of
# arrivals)
MAX_POOL = 1024
MAX_PROBLEMS = 1_000_000
SLO_S = (1e-3, 86_400.0)

__all__ = ["CV", "MAX_ARRIVAL_S", "MAX_POOL", "MAX_PROBLEMS", "RATE_PER_S", "SLO_S"]
