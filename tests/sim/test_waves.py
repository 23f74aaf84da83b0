"""Waveforms: a Verilator run with waves=True leaves a VCD that vcdvcd reads back."""

from vcdvcd import VCDVCD

from heteroreason.sim.cocotb_run import run_cocotb


def test_vcd_records_the_pointers():
    result = run_cocotb("kvmu", "heteroreason.sim.tb.kvmu_tb", params={"capacity": 64},
                        simulator="verilator", seed=1, testcase="scenario_accept",
                        waves=True)
    assert (result.tests, result.failed) == (1, 0)
    vcd = VCDVCD(str(result.waves))
    ahead = vcd["kvmu.ahead_ptr[6:0]"]
    valid = vcd["kvmu.valid_ptr[6:0]"]
    # scenario_accept ends with the second step accepted: valid == ahead == 30
    assert int(ahead.tv[-1][1], 2) == 30 and int(valid.tv[-1][1], 2) == 30
    assert [int(v, 2) for _, v in ahead.tv][:3] == [0, 20, 21]
