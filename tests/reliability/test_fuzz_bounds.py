"""Property-based bounds (Hypothesis, derandomized: the same examples on every run, and a failure
prints the example that broke): whatever sizes, times and option texts a user passes, the
library either takes them, within their stated bounds, or raises its own error naming the
parameter; never another exception, a hang or a value outside the bounds."""

from __future__ import annotations

import argparse
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heteroreason.commands.common import BOUNDS, positive
from heteroreason.model.files import InputError, loads_json
from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.limits import CV, MAX_ARRIVAL_S, MAX_POOL, MAX_PROBLEMS, RATE_PER_S
from heteroreason.model.fleet.search import FleetPoint
from heteroreason.model.fleet.workload import ArrivalKind, Arrivals
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.limits import DELIMITER_LIMIT, MULTIPLE_LIMIT, SIZE_LIMIT, WIDTH_LIMIT
from heteroreason.sim.flow.export import ExportError, check_limits, parse_params

FUZZ = settings(derandomize=True, max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

# sizes around every bound: small, at the bound, just past it, and absurd
sizes = st.one_of(
    st.integers(-3, 70), st.sampled_from([WIDTH_LIMIT, WIDTH_LIMIT + 1, SIZE_LIMIT,
                                          SIZE_LIMIT + 1, 10**12, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.text(max_size=4))


@FUZZ
@given(lanes=sizes, rows=sizes, buffer=sizes, params=sizes, batch=sizes, heads=sizes,
       delimiters=st.one_of(st.lists(st.integers(-2, 10**6), max_size=300), st.integers(),
                            st.text(max_size=3)))
def test_decoder_parameters_are_bounded(lanes, rows, buffer, params, batch, heads, delimiters):
    widths = rows if isinstance(rows, int) and not isinstance(rows, bool) and rows > 0 and \
        not rows & (rows - 1) else 1  # rows a beat must divide the widths
    try:
        p = DecoderParams(lanes, rows_per_beat=rows, weight_buffer=buffer, param_buffer=params,
                          ingest_batch=batch, heads_parallel=heads, vector_width=widths,
                          param_width=widths, delimiters=delimiters)
    except ValueError:
        return
    assert 1 <= p.lanes <= WIDTH_LIMIT and 1 <= p.heads_parallel <= WIDTH_LIMIT
    assert 1 <= p.rows_per_beat <= MULTIPLE_LIMIT and 1 <= p.ingest_batch <= MULTIPLE_LIMIT
    assert 1 <= p.weight_buffer <= SIZE_LIMIT and 1 <= p.param_buffer <= SIZE_LIMIT
    assert len(p.delimiters) <= DELIMITER_LIMIT
    assert DecoderParams.from_json(p.to_json()) == p


@FUZZ
@given(name=st.sampled_from(["lanes", "max_beats", "max_rows", "rows_per_beat", "vectors",
                             "seed", "nope"]),
       value=st.one_of(st.integers(-5, 2**40).map(str), st.text(max_size=6)))
def test_export_parameters_are_bounded_or_named(name, value):
    try:
        chosen = parse_params("mvu", [f"{name}={value}"])
        check_limits("mvu", chosen)
    except ExportError as exc:
        assert "mvu" in str(exc)
        return
    limit = MULTIPLE_LIMIT if name in ("rows_per_beat", "vectors") else \
        WIDTH_LIMIT if name == "lanes" else SIZE_LIMIT
    assert name == "seed" or chosen[name] <= limit


@FUZZ
@given(stamps=st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                 st.integers(-10, 10**12)), min_size=1, max_size=8),
       rate=st.floats(allow_nan=True, allow_infinity=True), cv=st.floats())
def test_arrivals_are_ordered_finite_and_bounded(stamps, rate, cv):
    try:
        trace = Arrivals(ArrivalKind.TRACE, timestamps_s=tuple(stamps))
    except ValueError:
        pass
    else:
        assert all(0 <= t <= MAX_ARRIVAL_S and math.isfinite(t) for t in trace.timestamps_s)
        assert list(trace.timestamps_s) == sorted(trace.timestamps_s)
    try:
        gamma = Arrivals.gamma(rate, cv)
    except ValueError:
        return
    assert RATE_PER_S[0] <= gamma.rate_per_s <= RATE_PER_S[1] and CV[0] <= gamma.cv <= CV[1]


@FUZZ
@given(problems=sizes, seed=sizes, slo=st.one_of(st.none(), st.floats()),
       drafts=sizes, span=st.one_of(st.none(), st.floats(0.001, 1e12)),
       rate=st.floats(1e-4, 1e4))
def test_a_fleet_point_is_bounded_before_it_runs(problems, seed, slo, drafts, span, rate):
    try:
        point = FleetPoint(problems=problems, seed=seed, slo_s=slo, drafts=drafts,
                           min_span_s=span, rate_per_s=rate)
        count = point.problem_count
        spec = point.spec()
    except FleetError as exc:
        assert str(exc)
        return
    assert 1 <= count <= MAX_PROBLEMS and 1 <= spec.drafts <= MAX_POOL


@FUZZ
@given(bound=st.sampled_from(sorted(BOUNDS)), kind=st.sampled_from([int, float]),
       text=st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                      st.integers(-10, 10**9).map(str), st.text(max_size=6)))
def test_option_types_take_only_values_within_their_bounds(bound, kind, text):
    low, high, _ = BOUNDS[bound]
    try:
        value = positive(kind, bound)(text)
    except argparse.ArgumentTypeError as exc:
        assert text in str(exc) or repr(text) in str(exc)
        return
    assert low <= value <= high and math.isfinite(value) and isinstance(value, kind)


@FUZZ
@given(text=st.one_of(st.text(max_size=30),
                      st.integers(0, 3000).map(lambda n: "[" * n + "]" * (n % 7))))
def test_any_json_text_decodes_or_is_a_located_error(text):
    try:
        loads_json(text, "f.json")
    except InputError as exc:
        assert str(exc).startswith("f.json")
