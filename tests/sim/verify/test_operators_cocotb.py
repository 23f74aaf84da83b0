"""The decoder's operators on Verilator under cocotb, each on hundreds of random vectors whose
expected results come from the integer reference
(:mod:`heteroreason.model.spec.numerics.qwen2_int8`),
replayed with random idle cycles and backpressure by :mod:`heteroreason.sim.verify.tb.replay_tb`.
(The matrix-vector unit has its own bench, ``test_mvu_cocotb.py``.)"""

import json
import math

import numpy as np
import pytest

from heteroreason.model.spec.numerics.qwen2_float import greedy
from heteroreason.model.spec.numerics.qwen2_int8 import (
    attend,
    int_rmsnorm,
    int_rope,
    quant_multiplier,
    requant,
)
from heteroreason.sim.flow.export import seeded_model
from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.runner import run_cocotb


def replay(top, params, phases, tmp_path, *, seed, idle=0.3, backpressure=0.3):
    script = tmp_path / f"{top}.json"
    script.write_text(json.dumps({"phases": phases, "idle": idle,
                                  "backpressure": backpressure}))
    result = run_cocotb(top, "heteroreason.sim.verify.tb.replay_tb", params=params, seed=seed,
                        stimulus=Stimulus(script=str(script)))
    assert (result.tests, result.failed) == (1, 0), f"seed={seed}"
    outputs = sum(len(b) for p in phases for b in p.get("outputs", {}).values())
    assert outputs >= 300


def ints(values):
    return [int(v) for v in np.asarray(values).ravel()]


@pytest.mark.parametrize("width", [4])  # width 1: the Amaranth-simulator tests and the cores
def test_rmsnorm(width, tmp_path):
    max_length = 64
    rng = np.random.default_rng(21)
    phase = {"inputs": {"cmd": [], "x": [], "gain": []}, "outputs": {"y": []}}
    for _ in range(200 // width):
        n = width * int(rng.integers(1, max_length // width + 1))
        magnitude = int(rng.choice([3, 300, 8000, 32767]))
        r = rng.integers(-magnitude, magnitude + 1, n)
        eps_q = int(rng.integers(1, 50))
        mult, shift = quant_multiplier(rng.uniform(0.5, 1.5, n) /
                                       (2**15 * float(rng.uniform(0.005, 0.05))))
        expected = int_rmsnorm(r[None, :].astype(np.int64), (mult, shift), eps_q)[0]
        phase["inputs"]["cmd"].append({"length": n, "eps_q": eps_q})
        phase["inputs"]["x"] += [ints(r[k:k + width]) for k in range(0, n, width)]
        phase["inputs"]["gain"] += [{"mult": int(m), "shift": int(s)}
                                    for m, s in zip(mult, shift, strict=True)]
        phase["outputs"]["y"] += [{"value": int(v), "last": int(k == n - 1)}
                                  for k, v in enumerate(expected)]
    replay("rmsnorm", {"max_length": max_length, "width": width}, [phase], tmp_path, seed=21)


@pytest.mark.parametrize("preset, width", [
    ("test-tiny", 1), pytest.param("test-0.5b-layer", 8, marks=pytest.mark.slow)])
def test_rope(preset, width, tmp_path):
    model = seeded_model(preset, 1)
    hd = model.config.head_dim
    rng = np.random.default_rng(22)
    phase = {"inputs": {"cmd": [], "x": []}, "outputs": {"y": []}}
    for _ in range(150):
        pos = int(rng.choice([0, 1, int(rng.integers(0, 32767))]))
        heads = rng.integers(-128, 128, (int(rng.integers(1, 4)), hd))
        expected = int_rope(heads[None], np.array([pos]), model.rope_inc)[0].ravel()
        flat = heads.ravel()
        phase["inputs"]["cmd"].append(pos)
        for name, values in (("x", flat), ("y", expected)):
            side = "inputs" if name == "x" else "outputs"
            phase[side][name] += [{"value": ints(values[k:k + width]),
                                   "last": int(k + width == flat.size)}
                                  for k in range(0, flat.size, width)]
    replay("rope", {"preset": preset, "seed": 1, "max_position": 32767, "width": width},
           [phase], tmp_path, seed=22)


@pytest.mark.parametrize("heads, head_dim, width", [
    pytest.param(1, 16, 1, marks=pytest.mark.slow), (3, 8, 4)])
def test_attention(heads, head_dim, width, tmp_path):
    layers, kv_heads, max_context = 2, 2, 48
    rng = np.random.default_rng(23 + heads)
    keys = rng.integers(-128, 128, (layers, kv_heads, max_context, head_dim))
    values = rng.integers(-128, 128, (layers, kv_heads, max_context, head_dim))
    writes = [{"layer": layer, "kv_head": kv, "pos": pos, "k": ints(keys[layer, kv, pos]),
               "v": ints(values[layer, kv, pos])}
              for layer in range(layers) for kv in range(kv_heads) for pos in range(max_context)]
    jobs = {"inputs": {"cmd": [], "q": []}, "outputs": {"out": []}}
    for _ in range(120 * width // heads):
        layer, kv = int(rng.integers(layers)), int(rng.integers(kv_heads))
        length = int(rng.integers(1, max_context + 1))
        q = rng.integers(-128, 128, (heads, head_dim))
        exp_req = quant_multiplier(float(rng.uniform(0.0005, 0.02)) / math.sqrt(head_dim) * 32)
        attn_req = quant_multiplier(float(rng.uniform(0.005, 0.05)) / 2**16 / 0.01)
        expected = attend(q[None], np.repeat(keys[layer, kv, :length][:, None], heads, 1),
                          np.repeat(values[layer, kv, :length][:, None], heads, 1),
                          np.ones((1, length), bool), exp_req, attn_req)[0].ravel()
        jobs["inputs"]["cmd"].append({
            "layer": layer, "kv_head": kv, "length": length, "exp_mult": int(exp_req[0]),
            "exp_shift": int(exp_req[1]), "out_mult": int(attn_req[0]),
            "out_shift": int(attn_req[1])})
        jobs["inputs"]["q"] += [ints(row) for row in q]
        jobs["outputs"]["out"] += [{"value": ints(expected[k:k + width]),
                                    "last": int(k + width == expected.size)}
                                   for k in range(0, expected.size, width)]
    params = {"head_dim": head_dim, "kv_heads": kv_heads, "layers": layers,
              "max_context": max_context, "heads": heads, "width": width}
    replay("attention", params, [{"inputs": {"kv_write": writes}}, jobs], tmp_path,
           seed=23 + heads)


def test_swiglu(tmp_path):
    model = seeded_model("test-tiny", 3)
    rng = np.random.default_rng(24)
    phases = []
    for layer in model.layers:  # a table per layer, then every gate value and random pairs
        gate = np.concatenate([np.arange(-128, 128), rng.integers(-128, 128, 300)])
        up = rng.integers(-128, 128, gate.size)
        expected = requant(layer.silu[gate + 128] * up, layer.act_req, 8)
        phases.append({"inputs": {
            "table": [{"addr": a, "value": int(layer.silu[a])} for a in range(256)],
            "params": [{"mult": int(layer.act_req[0]), "shift": int(layer.act_req[1])}]}})
        phases.append({
            "inputs": {"x": [{"gate": int(g), "up": int(u), "last": int(k == gate.size - 1)}
                             for k, (g, u) in enumerate(zip(gate, up, strict=True))]},
            "outputs": {"y": [{"value": int(v), "last": int(k == gate.size - 1)}
                              for k, v in enumerate(expected)]}})
    replay("swiglu", {}, phases, tmp_path, seed=24)


def test_sampler(tmp_path):
    vocab, delimiter, eos = 64, 5, 2
    rng = np.random.default_rng(25)
    phase = {"inputs": {"logits": []}, "outputs": {"token": []}}
    for i in range(300):
        spread = [3, 2**31 - 1][i % 2]
        v = rng.integers(-spread, spread, vocab)
        if i % 5 == 0:
            v[rng.integers(0, vocab, 3)] = v.max()  # ties at the maximum: lowest index wins
        if i % 7 == 0:
            v[[eos, delimiter, 9][i % 3]] = 2**31 - 1
        token = greedy(v)
        phase["inputs"]["logits"] += [{"value": int(x), "last": int(k == vocab - 1)}
                                      for k, x in enumerate(v)]
        phase["outputs"]["token"].append({"token": token,  # EOS ends a step too
                                          "step_end": int(token in (delimiter, eos)),
                                          "eos": int(token == eos)})
    replay("sampler", {"vocab": vocab, "delimiter": delimiter, "eos": eos}, [phase], tmp_path,
           seed=25)
