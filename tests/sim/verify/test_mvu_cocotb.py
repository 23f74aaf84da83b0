"""The matrix-vector unit's cocotb bench on Verilator at two parallelism settings."""

import pytest

from heteroreason.sim.verify.runner import run_cocotb


@pytest.mark.parametrize("lanes, max_beats", [pytest.param(4, 10, marks=pytest.mark.slow),
                                              (16, 4)])
def test_mvu(simulator, lanes, max_beats):
    result = run_cocotb("mvu", "heteroreason.sim.verify.tb.mvu_tb",
                        params={"lanes": lanes, "max_beats": max_beats, "max_rows": 16},
                        simulator=simulator, seed=lanes)
    assert (result.tests, result.failed) == (2, 0)
