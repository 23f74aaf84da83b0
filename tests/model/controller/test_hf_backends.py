"""HuggingFace backends on tiny random models saved locally (skipped without transformers)."""

import importlib.util
import re

import numpy as np
import pytest

from heteroreason.model.controller.brsd import ControllerConfig, ControllerError, run_problem

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
    reason="transformers and torch are not installed (pip install torch==2.13.0 transformers)")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    import torch
    import transformers

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("hf")
    config = transformers.Qwen2Config(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=0)
    for name, cls in (("lm", transformers.Qwen2ForCausalLM),
                      ("prm", transformers.Qwen2ForSequenceClassification)):
        if name == "prm":
            config.num_labels = 2
        cls(config).save_pretrained(root / name)
    return root


def test_generator_matches_a_plain_greedy_loop_and_reuses_its_cache(saved):
    import torch
    import transformers

    from heteroreason.model.controller.hf_backends import HFGenerator

    gen = HFGenerator("draft", saved / "lm")
    stops = frozenset({5})
    context = [3, 9, 27, 81, 115]
    step = gen.generate_step(context, max_tokens=10, stop=stops)
    model = transformers.Qwen2ForCausalLM.from_pretrained(saved / "lm").eval()
    tokens, expected = list(context), []
    with torch.no_grad():
        for _ in range(10):
            token = int(model(torch.tensor([tokens])).logits[0, -1].argmax())
            expected.append(token)
            tokens.append(token)
            if token in stops:
                break
    assert step == expected
    assert gen.generate_step(context, max_tokens=10, stop=stops) == expected  # rolled back
    longer = gen.generate_step(context + step, max_tokens=4, stop=stops)
    assert len(longer) >= 1


def test_controller_with_hf_backends(saved):
    from heteroreason.model.controller.hf_backends import HFGenerator, HFSequenceScorer

    prm = HFSequenceScorer("prm", saved / "prm")
    score = prm.score_step([1, 2, 3], [4, 5])
    assert 0.0 <= score <= 1.0
    trace, chain = run_problem(
        list(np.arange(10, 20)), draft=HFGenerator("draft", saved / "lm"),
        target=HFGenerator("target", saved / "lm"), prm=prm,
        config=ControllerConfig(delimiters=frozenset({7}), eos=1, max_step_tokens=8,
                                max_steps=4), dataset="hf", problem_id="0")
    assert len(trace.steps) == 4 and trace.output_tokens == len(chain)


def test_missing_or_wrong_models(tmp_path, saved):
    from heteroreason.model.controller.hf_backends import HFGenerator

    with pytest.raises(ControllerError, match=rf"^{re.escape(str(tmp_path))}: not a saved model "
                                              r"\(no config\.json\); HuggingFace backends load "
                                              r"local paths only$"):
        HFGenerator("draft", tmp_path)
    gen = HFGenerator("draft", saved / "lm")
    with pytest.raises(ControllerError, match=r"^draft: context of 297 tokens plus a step of up "
                                              r"to 4 exceeds its maximum of 256$"):
        gen.generate_step(list(range(1, 100)) * 3, max_tokens=4, stop=frozenset())
