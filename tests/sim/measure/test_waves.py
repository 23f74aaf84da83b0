"""Waveforms: a Verilator run with waves=True leaves a VCD that vcdvcd reads back."""

import pytest
from vcdvcd import VCDVCD

from heteroreason.rtl.decoder.core import TOKEN_START_LATENCY
from heteroreason.rtl.decoder.operators import LAYER_OPERATORS
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.decoder.sampler import LATENCY as SAMPLER_LATENCY
from heteroreason.rtl.decoder.sequencer import LEAVE_LATENCY, LOGIT_LATENCY
from heteroreason.sim.measure.cycles import measure_token_cycles
from heteroreason.sim.measure.waves import core_activity, operator_name
from heteroreason.sim.verify.runner import run_cocotb


def test_vcd_records_the_pointers():
    result = run_cocotb("kvmu", "heteroreason.sim.verify.tb.kvmu_tb", params={"capacity": 64},
                        simulator="verilator", seed=1, testcase="scenario_accept",
                        waves=True)
    assert (result.tests, result.failed) == (1, 0)
    vcd = VCDVCD(str(result.waves))
    ahead = vcd["kvmu.ahead_ptr[6:0]"]
    valid = vcd["kvmu.valid_ptr[6:0]"]
    # scenario_accept ends with the second step accepted: valid == ahead == 30
    assert int(ahead.tv[-1][1], 2) == 30 and int(valid.tv[-1][1], 2) == 30
    assert [int(v, 2) for _, v in ahead.tv][:3] == [0, 20, 21]


@pytest.mark.slow
def test_decoder_waveform_agrees_with_the_counters():
    """The same run read two ways: the testbench's counters and the VCD (busy, pc/layer, the
    weight stream's handshakes) give the same token cycles, beats, waits and holds."""
    run = measure_token_cycles("test-tiny", DecoderParams(32, 32, heads_parallel=2,
                                                          weight_buffer=64),
                               (5, 40), latency=10, waves=True)
    tokens = core_activity(run.waves)
    assert len(tokens) == len(run.tokens) == 2
    offsets = set()
    layers = 2
    expected = ["embed", *[op.name for op in LAYER_OPERATORS] * layers, "final_norm",
                "lm_head", "end"]
    for wave, count in zip(tokens, run.tokens, strict=True):
        assert wave.stream_beats == count.stream_beats
        assert wave.weight_wait == count.weight_wait
        assert wave.buffer_full == count.buffer_full
        # after the sequencer's end: the last logit's register and the sampler's pipeline,
        # less the LM head's leave cycle (which they overlap)
        offsets.add(count.cycles - wave.busy_cycles)
        # the operators of the table, then the sequencer's one end cycle
        assert [operator_name(o[0]) for o in wave.operators] == expected
        assert wave.operators[-1][3] == 1
        assert wave.start_cycles == TOKEN_START_LATENCY
        assert sum(o[3] for o in wave.operators) + wave.start_cycles == wave.busy_cycles
    assert offsets == {LOGIT_LATENCY + SAMPLER_LATENCY - LEAVE_LATENCY}
    # attention grows with the context, the matrix-vector operators do not
    attention = [sum(o[3] for o in t.operators if operator_name(o[0]) == "attention")
                 for t in tokens]
    assert attention[1] > attention[0] + 2 * 35 * 3
    # read and checked: the VCD (about 140 MB) need not outlive the test
    run.waves.unlink()
