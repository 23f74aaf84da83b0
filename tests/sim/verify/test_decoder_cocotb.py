"""The decoder core and the DraftEngine on Verilator under cocotb, against the integer
reference: greedy tokens through the core, and the engine's host scenarios (accept, reject with
shadow ingest, backtrack) with random stalls on every stream."""

import json
from dataclasses import replace

import pytest

from heteroreason.sim.flow.export import seeded_model
from heteroreason.sim.verify.engine_scenarios import instantiate
from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.runner import run_cocotb

TEMPLATES = [
    ("accept", (5, 77, 130), ("accept", "accept", "accept")),
    ("reject", (5, 77, 130), (("reject", 2), "accept")),
    ("backtrack", (5, 77, 130), ("accept", ("reject", 3), ("backtrack", 2), "accept")),
]
# stalls on every stream: HBM gaps and latency, idle host, backpressure on the outputs
STALLS = Stimulus(latency=20, stall=0.2, idle=0.3, backpressure=0.3)
SMOOTH = Stimulus()
# the weight stream split over four HBM ports of their own latency and stall: beats arrive in
# bursts at the slowest port's pace
UNEVEN = replace(STALLS, weight_ports=((5, 0.0), (20, 0.1), (40, 0.3), (90, 0.5)))


def scenario_set(preset: str, seed: int):
    scenarios, delimiter, eos = instantiate(seeded_model(preset, seed), TEMPLATES, seed=seed)
    return {s.name: s for s in scenarios}, delimiter, eos


@pytest.fixture(scope="module")
def tiny_scenarios():
    return scenario_set("test-tiny", 1)


def run_scenario(scenario, delimiter, eos, params, stimulus, *, seed, tmp_path):
    result_file = tmp_path / f"{scenario.name}.json"
    result = run_cocotb(
        "draft_engine", "heteroreason.sim.verify.tb.engine_tb",
        params=params | {"delimiter": delimiter, "eos": eos}, testcase="scenario", seed=seed,
        stimulus=replace(stimulus, scenario=scenario.to_json(), result=str(result_file)))
    assert (result.tests, result.failed) == (1, 0)
    return json.loads(result_file.read_text())


ENGINE_A = {"preset": "test-tiny", "seed": 1, "capacity": 128, "lanes": 32, "stream_bytes": 16,
            "heads_parallel": 2, "weight_buffer": 256}
ENGINE_B = {"preset": "test-tiny", "seed": 1, "capacity": 64, "lanes": 16, "stream_bytes": 16,
            "heads_parallel": 1, "weight_buffer": 32, "param_buffer": 16, "external_kv": 1,
            "vector_width": 4, "param_width": 2, "rows_per_beat": 2, "kv_rows": 2}


@pytest.mark.parametrize("name", [pytest.param("accept", marks=pytest.mark.slow), "reject",
                                  pytest.param("backtrack", marks=pytest.mark.slow)])
def test_engine_scenarios_with_stalls(tiny_scenarios, name, tmp_path):
    scenarios, delimiter, eos = tiny_scenarios
    record = run_scenario(scenarios[name], delimiter, eos, ENGINE_A, STALLS, seed=11,
                          tmp_path=tmp_path)
    kinds = [e[0] for e in record["events"]]
    assert kinds.count("draft") >= len(scenarios[name].verdicts) + 1
    if name != "accept":
        assert "reject" in kinds
        # after the rollback the host's tokens take the rejected step's positions
        at = kinds.index("reject")
        assert kinds[at + 1] == "host_token"
    if name == "backtrack":
        assert kinds.count("init") == 2


@pytest.mark.parametrize("name", [pytest.param("reject", marks=pytest.mark.slow),
                                  pytest.param("backtrack", marks=pytest.mark.slow),
                                  pytest.param("accept", marks=pytest.mark.slow)])
def test_engine_scenarios_with_batched_ingest(tiny_scenarios, name, tmp_path):
    """The engine gathering host tokens two a pass (the prompt, the target's refined steps
    after a rejection, the re-initialisations of a backtrack): every draft token is checked
    against the reference inside the bench, and the core is busy for fewer cycles than the
    same scenario takes a token a pass."""
    scenarios, delimiter, eos = tiny_scenarios
    batched = run_scenario(scenarios[name], delimiter, eos, ENGINE_A | {"ingest_batch": 2},
                           STALLS, seed=12, tmp_path=tmp_path)
    kinds = [e[0] for e in batched["events"]]
    assert kinds.count("draft") >= len(scenarios[name].verdicts) + 1
    assert ("reject" in kinds) == (name != "accept")
    single = run_scenario(scenarios[name], delimiter, eos, ENGINE_A, STALLS, seed=12,
                          tmp_path=tmp_path)
    assert batched["drafts"] == single["drafts"]
    # (reject: 57,177 against 64,669 cycles; backtrack: 96,933 against 107,699)
    assert batched["busy_cycles"] < 0.95 * single["busy_cycles"], (batched["busy_cycles"],
                                                                   single["busy_cycles"])


def test_engine_with_the_weights_over_uneven_hbm_ports(tiny_scenarios, tmp_path):
    """Every draft token is checked against the reference inside the bench."""
    scenarios, delimiter, eos = tiny_scenarios
    record = run_scenario(scenarios["reject"], delimiter, eos, ENGINE_A, UNEVEN, seed=14,
                          tmp_path=tmp_path)
    kinds = [e[0] for e in record["events"]]
    assert kinds.count("draft") >= len(scenarios["reject"].verdicts) + 1
    at = kinds.index("reject")
    assert kinds[at + 1] == "host_token"


@pytest.mark.slow
@pytest.mark.evidence
def test_engine_at_other_parallelism(tiny_scenarios, tmp_path):
    scenarios, delimiter, eos = tiny_scenarios
    smooth = run_scenario(scenarios["backtrack"], delimiter, eos, ENGINE_B, SMOOTH, seed=12,
                          tmp_path=tmp_path)
    stalled = run_scenario(scenarios["backtrack"], delimiter, eos, ENGINE_B, STALLS, seed=13,
                           tmp_path=tmp_path)
    # stalls change the timing, not the tokens: the steps the host judged are the same
    def judged(record):
        return [e for e in record["events"] if e[0] in ("submit", "host_token", "init")]
    assert judged(smooth)[:8] == judged(stalled)[:8]
    assert stalled["cycles"] > smooth["cycles"]


def run_core(params, stimulus, prompt, draft, *, seed, cxx_opt=None):
    result = run_cocotb("decoder_core", "heteroreason.sim.verify.tb.core_tb", params=params,
                        testcase="greedy_matches_reference", seed=seed,
                        stimulus=replace(stimulus, prompt=tuple(prompt), draft=draft),
                        cxx_opt=cxx_opt)
    assert (result.tests, result.failed) == (1, 0)


@pytest.mark.slow
def test_core_greedy_tokens():
    run_core({"preset": "test-small", "seed": 2, "lanes": 32, "stream_bytes": 8,
              "heads_parallel": 4, "weight_buffer": 512, "vector_width": 8}, STALLS,
             [5, 77, 130], 2, seed=3)


@pytest.mark.slow
@pytest.mark.evidence
def test_core_with_wide_parameter_beats():
    """Four gains a parameter beat: the RMSNorm emits four results a cycle into a scratchpad
    row's span, with stalls on the parameter stream too (the default run has four gains a beat
    in :func:`test_core_with_two_rows_a_beat`, with two rows a beat besides)."""
    run_core({"preset": "test-small", "seed": 4, "lanes": 16, "stream_bytes": 8,
              "heads_parallel": 2, "weight_buffer": 64, "vector_width": 8, "param_width": 4},
             STALLS, [9, 400, 17], 2, seed=7)


@pytest.mark.slow
@pytest.mark.evidence
def test_core_with_two_rows_a_beat():
    """Two rows a matrix-vector beat (32-byte weight beats from an 8-byte stream): two row
    parameters a parameter beat, two results a cycle into the scratchpad's spans, SwiGLU and
    the sampler two a cycle, with stalls on every stream."""
    run_core({"preset": "test-small", "seed": 5, "lanes": 16, "stream_bytes": 8,
              "heads_parallel": 2, "weight_buffer": 64, "vector_width": 8, "param_width": 4,
              "rows_per_beat": 2}, STALLS, [9, 400, 17], 2, seed=8)


@pytest.mark.slow
@pytest.mark.evidence
def test_core_with_as_many_rows_a_beat_as_a_scratchpad_row():
    """Two rows a beat into two-element scratchpad rows: every result pair is a whole row (the
    residual's, the gate's, the store's), and the norm's two gains likewise."""
    run_core({"preset": "test-tiny", "seed": 6, "lanes": 8, "stream_bytes": 4,
              "heads_parallel": 2, "weight_buffer": 32, "vector_width": 2, "param_width": 2,
              "rows_per_beat": 2}, STALLS, [30, 200], 2, seed=9)


@pytest.mark.slow
@pytest.mark.evidence
def test_core_with_more_layers_than_the_0_5b():
    """26 layers: more operators than an 8-bit sequence counter holds."""
    run_core({"preset": "test-deep", "seed": 1, "lanes": 32, "stream_bytes": 32,
              "heads_parallel": 2, "weight_buffer": 256}, SMOOTH, [5, 77], 1, seed=6)


@pytest.mark.slow
@pytest.mark.parametrize("kv_rows", [1, pytest.param(4, marks=pytest.mark.evidence)])
def test_core_with_the_kv_cache_in_memory(kv_rows):
    """The greedy tokens with the KV cache in memory and stalls on every stream; with four key
    and value rows a memory beat (the long-context designs' attention), the rows of a beat past
    a job's length random bytes. (The same path at context 700, CI: ``test_shared_ports_rtl.py``;
    its bit-exactness in Amaranth's simulator: ``test_attention_amaranth.py``.)"""
    run_core({"preset": "test-small", "seed": 3, "lanes": 16, "stream_bytes": 16,
              "heads_parallel": 2, "weight_buffer": 64, "external_kv": 1, "vector_width": 4,
              "kv_rows": kv_rows},
             STALLS,
             [9, 400, 17, 250], 2, seed=5)


@pytest.mark.slow
@pytest.mark.fullsize
def test_full_size_layer_token():
    """One Qwen2.5-0.5B layer at full dimensions (hidden 896, FFN 4864, 14 heads, 2 KV heads,
    random int8 weights): a prompt token, then a decode token whose greedy sample equals the
    reference's, on the units of the design chosen for the U280 at 300 MHz at half its width
    (its 896 lanes double the build) — four rows of 448 MACs a 1,792-byte weight beat, 7 heads
    in parallel, four key and value rows a cycle, 32 scratchpad elements a cycle, 8 entries a
    parameter beat, the KV cache in memory, HBM latency 90 (the weight buffer shallower than
    the design's)."""
    run_core({"preset": "test-0.5b-layer", "seed": 1, "lanes": 448, "stream_bytes": 1792,
              "heads_parallel": 7, "weight_buffer": 512, "vector_width": 32, "param_width": 8,
              "rows_per_beat": 4, "external_kv": 1, "kv_rows": 4},
             Stimulus(latency=90), [5, 77], 0, seed=4, cxx_opt="-O0")


@pytest.mark.slow
def test_out_of_vocab_host_token_sets_the_status():
    result = run_cocotb("draft_engine", "heteroreason.sim.verify.tb.engine_tb",
                        params={"preset": "test-odd-vocab", "seed": 1, "capacity": 64,
                                "lanes": 32, "stream_bytes": 32, "heads_parallel": 2,
                                "weight_buffer": 256},
                        testcase="out_of_vocab_host_token", seed=7)
    assert (result.tests, result.failed) == (1, 0)
