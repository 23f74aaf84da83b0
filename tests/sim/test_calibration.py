"""The committed calibration of the FPGA timing model still matches the RTL: the quick grid's
RTL cycles agree with the calibrated model within 2 %, and the file names the RTL it came from
(an RTL change without recalibration fails here)."""

from heteroreason.model.calibration import load_calibration
from heteroreason.sim.calibrate import QUICK_GRID, measure


def test_quick_grid_agrees_with_the_committed_calibration():
    calibration = load_calibration()  # refuses a file from other RTL sources
    assert any(p.preset == "test-0.5b-layer" for p in calibration.held_out)
    assert all(abs(p.error(calibration.overheads)) <= 0.02 for p in calibration.held_out)
    for entry in QUICK_GRID:
        points, _ = measure(entry)
        assert [p.position for p in points] == list(entry.positions)
        for point in points:
            error = point.error(calibration.overheads)
            assert abs(error) <= 0.02, (entry, point.cycles, error)
