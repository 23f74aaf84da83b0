"""The committed calibration of the FPGA timing model still matches the RTL: the quick grid's
RTL cycles agree with the calibrated model within 2 %, and the file names the RTL it came from
(an RTL change without recalibration fails here)."""

import pytest

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.calibration import Point, load_calibration
from heteroreason.model.timing.fpga.core_cycles import CoreTiming
from heteroreason.sim.measure.cycles import measure_token_cycles
from heteroreason.sim.measure.grid import QUICK_GRID, measure


# the held-out entry in the default run, the fitted one with the long runs
@pytest.mark.parametrize("entry", [
    pytest.param(e, marks=() if e.held_out else pytest.mark.slow) for e in QUICK_GRID],
    ids=lambda e: f"{e.preset}-{e.params.lanes}")
def test_quick_grid_agrees_with_the_committed_calibration(entry):
    calibration = load_calibration()  # refuses a file from other RTL sources
    assert any(p.preset == "test-0.5b-layer" for p in calibration.held_out)
    assert all(abs(p.error(calibration.overheads)) <= 0.02 for p in calibration.held_out)
    # one token a position: the build is the cost, and -O0 compiles the model in about half
    # the time (the cycles do not depend on it)
    points, _ = measure(entry, cxx_opt="-O0")
    assert [p.position for p in points] == list(entry.positions)
    for point in map(Point.of, points):
        error = point.error(calibration.overheads)
        assert abs(error) <= 0.02, (entry, point.cycles, error)


@pytest.mark.slow
@pytest.mark.parametrize("stall", [0.25, 0.5])
def test_a_slower_weight_stream_is_priced_at_its_rate(stall):
    """The HBM model skips a beat with probability ``stall``: the timing model at
    ``1 - stall`` beats a cycle (the rate a memory plan gives it) agrees with the RTL."""
    calibration = load_calibration()
    entry = QUICK_GRID[0]  # test-tiny, 16 MACs on an 8-byte stream: the stream sets the pace
    run = measure_token_cycles(entry.preset, entry.params, (300,),
                               latency=entry.memory_latency_cycles, stall=stall, cxx_opt="-O0")
    token = run.tokens[0]
    model = CoreTiming(qwen2_config(entry.preset), entry.params, entry.memory_latency_cycles,
                       calibration.overheads, stream_beats_per_cycle=1 - stall)
    assert token.weight_wait > 0
    assert model.token_cycles(300) == pytest.approx(token.cycles, rel=0.02), (stall, token)
