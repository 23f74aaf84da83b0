"""The matrix-vector unit's cocotb bench on Verilator at four parallelism settings: one with four
rows a weight beat, one with two rows and three vectors a weight beat (batched ingest)."""

import re

import pytest

from heteroreason.sim.verify.runner import run_cocotb


@pytest.mark.parametrize("lanes, max_beats, rows_per_beat, vectors", [
    pytest.param(4, 10, 1, 1, marks=pytest.mark.slow), (16, 4, 1, 1), (8, 5, 4, 1),
    (8, 5, 2, 3)])
def test_mvu(simulator, lanes, max_beats, rows_per_beat, vectors):
    result = run_cocotb("mvu", "heteroreason.sim.verify.tb.mvu_tb",
                        params={"lanes": lanes, "max_beats": max_beats, "max_rows": 16,
                                "rows_per_beat": rows_per_beat, "vectors": vectors},
                        simulator=simulator, seed=lanes + rows_per_beat + vectors)
    assert (result.tests, result.failed) == (2, 0)
    # the vector buffer starts at zeros: written out for Icarus (which starts memories at x),
    # left to Verilator (which zeroes them)
    verilog = (result.build_dir / "mvu.v").read_text()
    zeros_written = re.search(r"buffer\d*\[0\] = \d+'h0+;", verilog) is not None
    assert zeros_written == (result.build_dir.parent.name == "icarus")


def test_mvu_icarus(icarus):
    """On Icarus too (the unit's ready outputs are decoded from a state register that stays at
    its reset value until the first command: X under Icarus's SystemVerilog rules, see
    ``SIM_BUILD_ARGS``)."""
    result = run_cocotb("mvu", "heteroreason.sim.verify.tb.mvu_tb",
                        params={"lanes": 8, "max_beats": 5, "max_rows": 16, "rows_per_beat": 2,
                                "vectors": 3}, simulator=icarus, seed=3)
    assert (result.tests, result.failed) == (2, 0)
