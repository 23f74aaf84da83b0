"""The validation report's levels a and c: the restatement of the artifact simulator's schedule
gives hand-computed latencies; with every difference switched to this project's semantics it
equals the scheduler's ``heteroreason`` replay on every trace; on the artifact's own traces the
scheduler meets the goal with the prompt's convention aligned; the gap to the paper's figures
splits into factors that multiply to it."""

import itertools
import json
from dataclasses import replace

import pytest

from heteroreason.model.experiments.artifact_semantics import (
    ACCEPT,
    BACKTRACK,
    RESCUE,
    Alignment,
    ArtifactEvent,
    ArtifactProblem,
    artifact_events,
    artifact_latency_ms,
    config_coefficients,
    read_artifact_config,
    read_artifact_problem,
)
from heteroreason.model.experiments.decomposition import decompose, read_simulator_reference
from heteroreason.model.experiments.validation import (
    ALIGNMENT_ORDER,
    median_abs_pct,
    schedule_checks,
)
from heteroreason.model.files import InputError
from heteroreason.model.system.config import system_config
from heteroreason.model.system.simulate import simulate
from heteroreason.model.timing.device_timing import LlmTiming
from heteroreason.model.timing.link import link
from heteroreason.model.workload.bundled import load_bundled
from heteroreason.model.workload.traces import TraceError

# round coefficients and a free link, so that the hand computations below are exact
ROUND = replace(
    system_config("config1"),
    fpga=LlmTiming("fpga/test", "qwen2.5-0.5b", "test", decode_ms_per_token=1.0),
    prm=LlmTiming("prm/test", "qwen2.5-math-prm-7b", "test", decode_ms_per_token=0.0,
                  prefill_call_ms=10.0, prefill_ms_per_token=0.1),
    target=LlmTiming("target/test", "qwen2.5-7b", "test", decode_ms_per_token=5.0,
                     prefill_ms_per_token=0.5),
    draft_gpu=LlmTiming("draft/test", "qwen2.5-0.5b", "test", decode_ms_per_token=1.0,
                        prefill_call_ms=3.0),
    link=link("ideal"))


def problem(*events):
    return ArtifactProblem("math500", "0", 10, tuple(events))


def test_the_artifacts_schedule_by_hand():
    # prompt prefill 3; first draft of 4 tokens 4
    # accept: PRM 10 + 0.4 against the next draft's 6: 10.4
    # rescue: PRM 10 + 1.0; the target's run (prefill 4 x 0.5, 5 tokens x 5 = 27) less its window
    # (10.4 + 11): 5.6; the target's step scored (10 + 0.9) against the next draft (3): 10.9
    # accept, the last: PRM 10 + 1.2
    rescue = problem(ArtifactEvent(ACCEPT, 1, 4, 0), ArtifactEvent(RESCUE, 2, 6, 5),
                     ArtifactEvent(ACCEPT, 3, 3, 0))
    assert artifact_latency_ms(rescue, ROUND) == pytest.approx(3 + 4 + 10.4 + 11 + 5.6 + 10.9
                                                               + 11.2)
    # the rescue fails: the next event, its backtrack, drafts nothing (10.9 alone); the
    # backtrack is verified at the context before the drop (10 + 0.9), keeps step 1 (4
    # tokens), regenerates 2 (prefill 4 x 0.5 + 2 x 5 = 12, within its window 10.9 + 10.9),
    # its step scored (10 + 0.6) against the next draft (3); the last accept 10 + 0.9
    backtrack = problem(ArtifactEvent(ACCEPT, 1, 4, 0), ArtifactEvent(RESCUE, 2, 6, 5),
                        ArtifactEvent(BACKTRACK, 2, 0, 2, to_step=1),
                        ArtifactEvent(ACCEPT, 3, 3, 0))
    assert artifact_latency_ms(backtrack, ROUND) == pytest.approx(
        3 + 4 + 10.4 + 11 + 5.6 + 10.9 + 10.9 + 0 + 10.6 + 10.9)
    # the prompt in the contexts: every PRM call scores 10 more tokens (+1 ms), the target
    # prefills 10 more (+5 ms, less the slack of its window), the drafts attend to nothing
    # more here (no KV term)
    with_prompt = artifact_latency_ms(rescue, ROUND, Alignment(prompt_in_contexts=True))
    assert with_prompt == pytest.approx(3 + 4 + 11.4 + 12 + (2 + 5 + 25 - 11.4 - 12) + 11.9
                                        + 12.2)


@pytest.mark.parametrize("config_name", ["config1", "config2"])
@pytest.mark.parametrize("dataset", ["gaokao2023en", "olympiadbench"])
def test_with_every_difference_aligned_the_schedules_agree(config_name, dataset):
    config = replace(system_config(config_name), prompt_in_contexts=False)
    align = Alignment(**dict.fromkeys(ALIGNMENT_ORDER, True))
    traces = load_bundled(dataset)
    runs = simulate(traces, config, "heteroreason").runs
    assert sum(s.outcome.value == "backtrack" for t in traces for s in t.steps) > 10
    for trace, run in zip(traces, runs, strict=True):
        restated = artifact_latency_ms(artifact_events(trace), config, align)
        assert restated == pytest.approx(run.latency_ms, rel=1e-6), trace.problem_id


def test_every_difference_matters_somewhere():
    """Each switch moves some bundled problem: none is a no-op that the ladder would hide."""
    config = system_config("config1")
    problems = [artifact_events(t) for d in ("gaokao2023en", "olympiadbench")
                for t in load_bundled(d)]
    for name in Alignment.names():
        moved = sum(abs(artifact_latency_ms(p, config, Alignment(**{name: True}))
                        - artifact_latency_ms(p, config)) > 1e-6 for p in problems)
        assert moved > 0, name


def test_bad_artifact_files_are_named(tmp_path):
    path = tmp_path / "math500" / "example_0.json"
    path.parent.mkdir()
    event = {"status": "accept_pure_draft", "draft_tokens_spent": 5, "logical_step": 1}
    path.write_text(json.dumps({"idx": 0, "prompt_tokens": 9, "execution_trace": [
        event, {**event, "status": "maybe"}]}))
    with pytest.raises(TraceError, match=r"execution_trace\[1\].*status.*is not "
                                         r"accept_pure_draft"):
        read_artifact_problem(path)
    path.write_text(json.dumps({"idx": 0, "prompt_tokens": 9, "execution_trace": [
        {**event, "draft_tokens_spent": -1}]}))
    with pytest.raises(TraceError, match=r"draft_tokens_spent.*must not be negative"):
        read_artifact_problem(path)
    good = {"idx": 3, "prompt_tokens": 9, "execution_trace": [event]}
    path.write_text(json.dumps(good))
    assert read_artifact_problem(path) == ArtifactProblem(
        "math500", "3", 9, (ArtifactEvent(ACCEPT, 1, 5, 0),))
    config = tmp_path / "config1.json"
    config.write_text(json.dumps({"parameters_ms": {"draft_alpha": "fast"}}))
    with pytest.raises(InputError,
                       match=r"parameters_ms.draft_alpha must be a finite non-negative number"):
        read_artifact_config(config)


def test_on_the_artifacts_traces(artifact):
    files = sorted((artifact / "Hardware/inputs/Config1/with_bt").glob("*/example_*.json"))
    assert len(files) == 120
    config = system_config("config1")
    # Config1's coefficients are the artifact simulator's own (to its rounding)
    _, params = read_artifact_config(artifact / "Hardware/simulator/configs/config1.json")
    ours = config_coefficients(config)
    for key, value in params.items():
        assert ours[key] == pytest.approx(value, rel=1e-4), key
    checks = schedule_checks(files, config)
    # issue 15's goal, with the prompt's convention aligned (0.82 % measured)
    assert median_abs_pct(c.difference for c in checks) <= 1.0
    # every remaining difference is one of the named ones: aligned, nothing is left
    assert max(abs(c.ladder_differences()[-1]) for c in checks) < 1e-6
    # the artifact simulator's own component checks (simulator_reference.json)
    reference = json.loads((artifact / "Hardware/reference_results/simulator_reference.json")
                           .read_text())["cases"]["Config1"]["with_bt"]["component_checks_ms"]
    assert config.fpga.decode_ms(10, 0) == pytest.approx(reference["draft_kv0_n10"])
    assert config.prm.prefill_ms(1000) == pytest.approx(reference["prm_n1000"], rel=1e-6)


def test_the_simulator_reference_is_checked(tmp_path):
    path = tmp_path / "simulator_reference.json"
    path.write_text(json.dumps({"cases": {"Config1": {"with_bt": {"datasets": {
        "math500": {"average_latency_ms": 0}}}}}}))
    with pytest.raises(InputError, match=r"Config1.with_bt.math500: field 'average_latency_ms' "
                                         r"must be a positive number, not 0"):
        read_simulator_reference(path)
    path.write_text(json.dumps({"cases": {}}))
    with pytest.raises(InputError, match=r"no cases.Config1.with_bt.datasets"):
        read_simulator_reference(path)


def test_the_factors_of_the_gap(artifact):
    files = sorted((artifact / "Hardware/inputs/Config1/with_bt").glob("*/example_*.json"))
    reference = read_simulator_reference(
        artifact / "Hardware/reference_results/simulator_reference.json")
    bundled = {d: load_bundled(d) for d in ("math500", "gsm8k")}
    links = decompose(files, reference, bundled)
    chain = [link for link in links if link.mode == "heteroreason"]
    assert [link.kind for link in chain] == ["paper", "artifact", "model", "model", "model",
                                             "model"]
    assert chain[0].latency_s["math500"] == 8.84  # the paper's Fig. 10
    assert chain[1].latency_s["gsm8k"] == pytest.approx(
        reference["gsm8k"]["average_latency_ms"] / 1e3)
    # the samples' links are level a's per-problem figures, averaged
    checks = schedule_checks(files, system_config("config1"))
    for d in ("math500", "olympiadbench"):
        mine = [c for c in checks if c.dataset == d]
        assert chain[2].latency_s[d] == pytest.approx(
            sum(c.artifact_ms for c in mine) / len(mine) / 1e3)
        assert chain[3].latency_s[d] == pytest.approx(
            sum(c.ours_ms for c in mine) / len(mine) / 1e3)
        assert chain[4].latency_s[d] == pytest.approx(
            sum(c.ours_prompt_ms for c in mine) / len(mine) / 1e3)
    # the factors multiply to the whole gap; a dataset without bundled traces ends the chain
    product = 1.0
    for before, after in itertools.pairwise(chain):
        product *= after.factor(before, "gsm8k")
    assert product == pytest.approx(chain[-1].latency_s["gsm8k"] / chain[0].latency_s["gsm8k"])
    assert chain[-1].factor(chain[-2], "olympiadbench") is None
    # the GPU modes: the paper's draft is slower than the measured one on every dataset
    baseline = [link for link in links if link.mode == "baseline"]
    for d in ("math500", "gsm8k", "gaokao2023en", "olympiadbench"):
        assert baseline[2].factor(baseline[1], d) < 0.9
