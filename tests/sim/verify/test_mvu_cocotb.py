"""The matrix-vector unit's cocotb bench on Verilator at three parallelism settings, one with four
rows a weight beat."""

import re

import pytest

from heteroreason.sim.verify.runner import run_cocotb


@pytest.mark.parametrize("lanes, max_beats, rows_per_beat", [
    pytest.param(4, 10, 1, marks=pytest.mark.slow), (16, 4, 1), (8, 5, 4)])
def test_mvu(simulator, lanes, max_beats, rows_per_beat):
    result = run_cocotb("mvu", "heteroreason.sim.verify.tb.mvu_tb",
                        params={"lanes": lanes, "max_beats": max_beats, "max_rows": 16,
                                "rows_per_beat": rows_per_beat},
                        simulator=simulator, seed=lanes + rows_per_beat)
    assert (result.tests, result.failed) == (2, 0)
    # the vector buffer starts at zeros: written out for Icarus (which starts memories at x),
    # left to Verilator (which zeroes them)
    verilog = (result.build_dir / "mvu.v").read_text()
    zeros_written = re.search(r"buffer\[0\] = \d+'h0+;", verilog) is not None
    assert zeros_written == (result.build_dir.parent.name == "icarus")
