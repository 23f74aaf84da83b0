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


def test_decoder_waveform_agrees_with_the_counters(tmp_path):
    """The same run read two ways: the testbench's counters and the VCD (busy, pc/layer, the
    weight stream's handshakes) give the same token cycles, beats, waits and holds."""
    import json

    from heteroreason.sim.waves import core_activity

    out = tmp_path / "timing.json"
    result = run_cocotb(
        "decoder_core", "heteroreason.sim.tb.core_tb",
        params={"preset": "test-tiny", "lanes": 32, "stream_bytes": 32, "heads_parallel": 2,
                "weight_buffer": 64},
        testcase="token_timing", seed=1, waves=True,
        extra_env={"HR_POSITIONS": "5,40", "HR_LATENCY": "10", "HR_RESULT": str(out)})
    assert (result.tests, result.failed) == (1, 0)
    counters = json.loads(out.read_text())
    tokens = core_activity(result.waves)
    assert len(tokens) == len(counters) == 2
    offsets = set()
    for wave, count in zip(tokens, counters, strict=True):
        assert wave.stream_beats == count["stream_beats"]
        assert wave.weight_wait == count["weight_wait"]
        assert wave.buffer_full == count["buffer_full"]
        offsets.add(count["cycles"] - wave.busy_cycles)  # the token handshake and the sample
        layers = 2
        # the operators, then the sequencer's one end cycle
        assert len(wave.operators) == 1 + 14 * layers + 2 + 1 and wave.operators[-1][3] == 1
        assert sum(o[3] for o in wave.operators) == wave.busy_cycles
    assert len(offsets) == 1 and 0 <= offsets.pop() <= 3
    # attention grows with the context, the matrix-vector operators do not
    attention = [sum(o[3] for o in t.operators if o[0] == 8) for t in tokens]
    assert attention[1] > attention[0] + 2 * 35 * 3
