"""The units' LUTs and flip-flops: the lines through the committed syntheses, refitted here
from the fit evidence, and the estimate against every synthesized core."""

import pytest

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.fit import load_fit_evidence
from heteroreason.model.timing.fpga.resources import estimate_resources
from heteroreason.model.timing.fpga.unit_logic import (
    COEFFICIENTS,
    FITTED_ON,
    MEASURES,
    UnitPoint,
    fit_unit_lines,
    synthesized_points,
    unit_logic,
)


def test_the_coefficients_are_the_fit_of_the_committed_evidence():
    designs = [d for d in load_fit_evidence().designs if d.name in FITTED_ON]
    assert [d.name for d in designs] == list(FITTED_ON)
    assert fit_unit_lines(synthesized_points(designs)) == dict(COEFFICIENTS)
    assert set(COEFFICIENTS) == set(MEASURES)


def test_the_estimate_is_within_15_percent_of_every_synthesized_core():
    """The issue's bound on the LUTs and flip-flops, on each core the evidence holds (the
    DSP slices and memories are exact: test_unit_resources.py)."""
    for fit in load_fit_evidence().designs:
        config, params = qwen2_config(fit.design.preset), fit.design.params
        error = fit.estimate_error(estimate_resources(config, params))
        assert abs(error["lut"]) <= 0.15 and abs(error["ff"]) <= 0.15, (fit.name, error)
        logic = unit_logic(config, params)
        for unit, counts in fit.units.items():
            lut, ff = logic[unit]
            assert lut == pytest.approx(counts["lut"], rel=0.25, abs=50), (fit.name, unit)
            assert ff == pytest.approx(counts["ff"], rel=0.25, abs=50), (fit.name, unit)


def test_a_line_through_points_written_by_hand():
    # y = 100 + 3 x exactly, and a unit seen at one size only: the mean, weighted by the
    # inverse square of each count (2 and 4 give (2/4 + 4/16) / (1/4 + 1/16) = 2.4)
    pts = [UnitPoint("mvu", x, 100 + 3 * x, 10 * x) for x in (10, 20, 40)] + \
        [UnitPoint("sampler", 4, 2, 4), UnitPoint("sampler", 4, 4, 4)]
    lines = fit_unit_lines(pts)
    assert lines["mvu"].lut == (100.0, 3.0) and lines["mvu"].ff == (0.0, 10.0)
    assert lines["mvu"].points == 3 and lines["mvu"].worst == 0.0
    assert lines["sampler"].lut == (2.4, 0.0) and lines["sampler"].ff == (4.0, 0.0)
    assert lines["sampler"].worst == pytest.approx(0.4)
    assert lines["mvu"].at(100) == (400, 1000)


def test_extra_vectors_add_the_measured_lanes():
    config = qwen2_config("qwen2.5-0.5b")
    params = load_fit_evidence().design("u280-300").design.params
    one, four = unit_logic(config, params), unit_logic(config, params, 4)
    assert four["mvu"][0] - one["mvu"][0] == 3 * 42 * params.beat_bytes
    assert {u: v for u, v in four.items() if u != "mvu"} == \
        {u: v for u, v in one.items() if u != "mvu"}
