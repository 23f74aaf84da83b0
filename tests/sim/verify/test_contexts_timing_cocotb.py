"""A pass of several contexts on Verilator against the cycle model: the test-small core built
for four tokens a pass of 16 contexts, its KV cache in memory behind ports of 40 cycles'
latency, passes of four contexts at unrelated positions and their first token alone; each pass
takes ``CoreTiming.contexts_pass_cycles`` within 1 % (the committed calibration's overheads,
fitted on single tokens: these passes are held out)."""

import json
import tempfile
from pathlib import Path

import pytest

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.calibration import load_calibration
from heteroreason.model.timing.fpga.core_cycles import CoreTiming
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.sim.flow.export import DecoderDesign
from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.runner import run_cocotb

PARAMS = DecoderParams(32, stream_bytes=32, heads_parallel=4, weight_buffer=512,
                       vector_width=8, param_width=8, rows_per_beat=4, external_kv=True,
                       ingest_batch=4, contexts=16, delimiters=(16,), eos=1)
POSITIONS = (1000, 200, 37, 511, 1023, 0, 700, 300)
LATENCY = 40


def measured_passes():
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "passes.json"
        result = run_cocotb("decoder_core", "heteroreason.sim.verify.tb.core_tb",
                            params=DecoderDesign("test-small", PARAMS, 1).export_params(),
                            testcase="pass_timing", seed=1,
                            stimulus=Stimulus(positions=POSITIONS, latency=LATENCY,
                                              result=str(out)))
        assert (result.tests, result.failed) == (1, 0)
        return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.evidence  # 206 s in CI's long runs: with an RTL change's evidence chain instead
def test_a_pass_of_four_contexts_takes_the_modelled_cycles():
    timing = CoreTiming(qwen2_config("test-small"), PARAMS, LATENCY,
                        load_calibration().overheads)
    rows = measured_passes()
    assert [len(r["positions"]) for r in rows] == [4, 1, 4, 1]
    for row in rows:
        modelled = timing.contexts_pass_cycles(row["positions"])
        assert modelled == pytest.approx(row["cycles"], rel=0.01), (row, modelled)
    # four contexts a pass cost far less than four single tokens
    assert rows[0]["cycles"] < 2 * rows[1]["cycles"]
