"""Draft-model numerics: configs and counts, the float reference against HuggingFace, the integer
W8A8 model against the float one, the KV-cache API, and bad input."""

import importlib.util

import numpy as np
import pytest

from heteroreason.model.spec.numerics.qwen2_config import PRESETS, Qwen2Config, qwen2_config
from heteroreason.model.spec.numerics.qwen2_float import FloatDecoder, greedy, random_weights
from heteroreason.model.spec.numerics.qwen2_int8 import (
    COS,
    EXP,
    RSQRT,
    SIN,
    IntDecoder,
    activation_scales,
    quant_multiplier,
    quantize,
    rshift_round,
)

HAVE_HF = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))


def cosine(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module", params=["test-tiny", "test-small"])
def pair(request):
    config = qwen2_config(request.param)
    weights = random_weights(config, seed=1)
    model = quantize(weights, activation_scales(weights, seed=101))
    return config, weights, model


# ------------------------------------------------------------------ configs and counts

def test_presets_and_counts():
    big = qwen2_config("qwen2.5-0.5b")
    assert big.params == pytest.approx(494e6, rel=0.002)
    assert big.params - big.embedding_params == pytest.approx(358e6, rel=0.002)
    assert big.kv_bytes_per_token(2) == 12288
    c0, c1024 = big.decode_counts(0), big.decode_counts(1024)
    assert c0.weight_bytes == c1024.weight_bytes == pytest.approx(494e6, rel=0.01)
    assert c1024.macs["attention_scores"] == 24 * 896 * 1025
    assert c1024.kv_bytes_read == 24 * 2 * 128 * 1025 and c1024.kv_bytes_written == 24 * 256
    assert c1024.total_macs - c0.total_macs == 2 * 24 * 896 * 1024
    assert {"test-tiny", "test-small", "qwen2.5-1.5b", "qwen2.5-math-prm-7b"} <= set(PRESETS)


@pytest.mark.parametrize("kwargs, message", [
    ({"hidden": 66}, r"^bad: heads \(4\) must divide hidden \(66\)$"),
    ({"kv_heads": 3}, r"^bad: kv_heads \(3\) must divide heads \(4\)$"),
    ({"head_dim": 8}, r"^bad: heads x head_dim \(4 x 8\) must equal hidden \(64\)$"),
    ({"layers": 0}, r"^bad: layers must be a positive integer, not 0$"),
    ({"vocab": -5}, r"^bad: vocab must be a positive integer, not -5$"),
    ({"ffn": 12.5}, r"^bad: ffn must be a positive integer, not 12\.5$"),
    ({"rope_theta": 0.0}, r"^bad: rope_theta and rms_norm_eps must be positive$"),
])
def test_impossible_shapes(kwargs, message):
    base = dict(name="bad", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128,
                vocab=256)
    with pytest.raises(ValueError, match=message):
        Qwen2Config(**(base | kwargs))


# ------------------------------------------------------------------ float reference

@pytest.mark.skipif(not HAVE_HF, reason="transformers and torch are not installed "
                    "(pip install torch==2.13.0 transformers)")
@pytest.mark.parametrize("name", ["test-tiny", "test-small"])
def test_float_reference_matches_huggingface(name):
    import torch
    import transformers

    config = qwen2_config(name)
    weights = random_weights(config, seed=4)
    hf_config = transformers.Qwen2Config(
        vocab_size=config.vocab, hidden_size=config.hidden, intermediate_size=config.ffn,
        num_hidden_layers=config.layers, num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads, max_position_embeddings=config.max_context,
        rope_theta=config.rope_theta, rms_norm_eps=config.rms_norm_eps,
        tie_word_embeddings=config.tied_embeddings, attn_implementation="eager")
    model = transformers.Qwen2ForCausalLM(hf_config).double().eval()
    state = {k: torch.from_numpy(np.asarray(v, dtype=np.float64))
             for k, v in weights.state_dict().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    tokens = np.random.default_rng(5).integers(0, config.vocab, 48)
    with torch.no_grad():
        reference = model(torch.from_numpy(tokens)[None]).logits[0].numpy()
    ours = FloatDecoder(weights)
    logits = np.concatenate([ours.prefill(tokens[:40]),
                             np.stack([ours.decode(int(t)) for t in tokens[40:]])])
    scale = np.abs(reference).max()
    assert np.abs(logits - reference).max() <= 1e-4 * scale
    assert np.std(reference, axis=1).mean() > 1.0, "logits are not flat"


def test_prefill_equals_token_by_token_decode():
    config = qwen2_config("test-tiny")
    weights = random_weights(config, seed=2)
    tokens = np.random.default_rng(1).integers(0, config.vocab, 20)
    a = FloatDecoder(weights).prefill(tokens)
    dec = FloatDecoder(weights)
    b = np.stack([dec.decode(int(t)) for t in tokens])
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------ integer model

def test_integer_model_quality(pair):
    config, weights, model = pair
    tokens = np.random.default_rng(7).integers(0, config.vocab, 300)
    f, q = FloatDecoder(weights), IntDecoder(model)
    f_logits, q_logits = f.prefill(tokens), q.prefill(tokens)
    assert q_logits.dtype == np.int64 and np.abs(q_logits).max() < 2**31
    assert cosine(f.last_hidden, q.dequantized_hidden()) >= 0.99
    assert cosine(f_logits, q.dequantized_logits(q_logits)) >= 0.99
    assert np.mean(f_logits.argmax(axis=1) == q_logits.argmax(axis=1)) >= 0.90


def test_integer_model_is_deterministic_and_incremental(pair):
    config, _, model = pair
    tokens = np.random.default_rng(8).integers(0, config.vocab, 24)
    full = IntDecoder(model).prefill(tokens)
    dec = IntDecoder(model)
    dec.prefill(tokens[:10])
    rest = np.stack([dec.decode(int(t)) for t in tokens[10:]])
    np.testing.assert_array_equal(full[10:], rest)


@pytest.mark.parametrize("decoder", ["float", "int"])
def test_accept_reject_backtrack_flows(pair, decoder):
    """The KVMU's flows replayed on a model: draft, reject (rollback), ingest, backtrack."""
    config, weights, model = pair
    make = (lambda: FloatDecoder(weights)) if decoder == "float" else (lambda: IntDecoder(model))
    prompt = list(np.random.default_rng(9).integers(0, config.vocab, 12))
    dec = make()
    logits = dec.prefill(prompt)[-1]
    drafted = []
    for _ in range(6):  # greedy drafting of a step
        drafted.append(greedy(logits))
        logits = dec.decode(drafted[-1])
    # the integer decoder is exact; the float one agrees to rounding (BLAS sums a 2-row and a
    # 6-row product in different orders)
    same = np.testing.assert_array_equal if decoder == "int" else \
        (lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12))
    dec.rollback(len(prompt))  # REJECT: back to the validated context
    refined = [3, 1, 4, 1, 5]
    after_refine = dec.prefill(refined)[-1]
    fresh = make()
    fresh.prefill(prompt)
    same(after_refine, fresh.prefill(refined)[-1])
    dec.rollback(4)  # backtrack: INIT(4)
    again = dec.prefill([7, 7])
    fresh = make()
    same(again, np.asarray(fresh.prefill([*prompt[:4], 7, 7])[-2:]))


@pytest.mark.parametrize("decoder", ["float", "int"])
def test_bad_input(pair, decoder):
    config, weights, model = pair
    dec = FloatDecoder(weights) if decoder == "float" else IntDecoder(model)
    with pytest.raises(ValueError, match=rf"^token id {config.vocab} is outside the vocabulary "
                                         rf"\[0, {config.vocab}\)$"):
        dec.prefill([1, config.vocab])
    with pytest.raises(ValueError, match=rf"^token id -1 is outside the vocabulary "
                                         rf"\[0, {config.vocab}\)$"):
        dec.decode(-1)
    with pytest.raises(ValueError, match=r"^tokens must be a non-empty 1-D sequence of integers$"):
        dec.prefill([])
    dec.prefill([1, 2, 3])
    with pytest.raises(ValueError, match=r"^rollback position must be in \[0, 3\] \(the cached "
                                         r"tokens\), not 4$"):
        dec.rollback(4)
    with pytest.raises(ValueError, match=rf"^context of {config.max_context + 3} tokens exceeds "
                                         rf"the maximum of {config.max_context}$"):
        dec.prefill(np.zeros(config.max_context, dtype=np.int64))
    assert dec.length == 3, "a refused call changes nothing"


def test_random_weights_arguments():
    config = qwen2_config("test-tiny")
    with pytest.raises(ValueError, match=r"^seed must be a non-negative integer, not -1$"):
        random_weights(config, seed=-1)
    with pytest.raises(ValueError, match=r"^layers must be in \[1, 2\], not 3$"):
        random_weights(config, seed=1, layers=3)
    a, b = random_weights(config, seed=3), random_weights(config, seed=3)
    assert np.array_equal(a.embed, b.embed)


# ------------------------------------------------------------------ arithmetic primitives

def test_rounding_and_multipliers():
    assert list(rshift_round(np.array([5, 6, 7, -5, -6, -7]), 2)) == [1, 2, 2, -1, -1, -2]
    assert list(rshift_round(np.array([3, -3]), 0)) == [3, -3]
    assert list(rshift_round(np.array([3]), -2)) == [12]
    for f in (1e-6, 0.37, 1.0, 3.9, 1234.5):
        m, k = quant_multiplier(f)
        assert 2**30 <= m < 2**31 and m / 2.0**k == pytest.approx(f, rel=2**-30)
    with pytest.raises(ValueError, match=r"^requantization factors must lie in \(0, 2\*\*30\)$"):
        quant_multiplier(0.0)


def test_tables():
    assert RSQRT[64] == 2**20 and RSQRT[255] == round(2**23 / 255**0.5)
    assert COS[0] == 2**14 and SIN[256] == 2**14 and len(COS) == 1024
    assert EXP[0] == 2**15 and EXP[255] > 0 and all(np.diff(EXP) <= 0)


def test_tied_embeddings_is_a_bool():
    with pytest.raises(ValueError, match=r"^bad: tied_embeddings must be a bool, not 'no'$"):
        Qwen2Config("bad", 64, 2, 4, 2, 16, 128, 256, "no")
