"""The multi-context DraftEngine on Verilator under cocotb: the accept, reject (shadow ingest)
and backtrack scenarios played on three contexts at once, interleaved on the one host stream,
with stalls on every stream; each context's drafts equal the integer reference's after that
context's own tokens (:mod:`heteroreason.sim.verify.tb.multi_engine_tb`)."""

import json
from dataclasses import replace

import pytest

from heteroreason.sim.verify.runner import run_cocotb
from tests.sim.verify.test_decoder_cocotb import ENGINE_B, STALLS, scenario_set

MULTI = ENGINE_B | {"ingest_batch": 2, "contexts": 3, "capacity": 64}


def run_scenarios(names, params, stimulus, *, seed, tmp_path):
    scenarios, delimiter, eos = scenario_set("test-tiny", 1)
    result_file = tmp_path / "multi.json"
    result = run_cocotb(
        "draft_engine", "heteroreason.sim.verify.tb.multi_engine_tb",
        params=params | {"delimiter": delimiter, "eos": eos}, testcase="scenarios", seed=seed,
        stimulus=replace(stimulus, scenarios=[scenarios[n].to_json() for n in names],
                         result=str(result_file)))
    assert (result.tests, result.failed) == (1, 0), f"seed={seed}"
    return json.loads(result_file.read_text())


@pytest.mark.slow
def test_three_contexts_interleaved_with_stalls(tmp_path):
    """Three contexts, two tokens a pass: every context's drafts are its own reference's, and
    passes carried more than one token on average (contexts shared passes)."""
    record = run_scenarios(["accept", "reject", "backtrack"], MULTI, STALLS, seed=31,
                           tmp_path=tmp_path)
    assert all(record["drafts"][str(k)] for k in range(3)), "seed=31: a context never drafted"
    assert record["tokens"] > 1.2 * record["passes"], f"seed=31: {record}"


def test_context_errors_are_reported_and_refused():
    """Tokens to a context never initialised and to an id out of range, and a token outside
    the vocabulary: each reported (the context's error, the engine's, ``bad_token``), none
    processed; drafting then matches the reference."""
    result = run_cocotb("draft_engine", "heteroreason.sim.verify.tb.multi_engine_tb",
                        params={"preset": "test-odd-vocab", "seed": 1, "capacity": 64,
                                "lanes": 32, "stream_bytes": 32, "heads_parallel": 2,
                                "weight_buffer": 256, "ingest_batch": 2, "contexts": 3},
                        testcase="context_errors",
                        seed=32)
    assert (result.tests, result.failed) == (1, 0), "seed=32"
