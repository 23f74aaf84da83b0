"""Timing forms, presets, the profile fitter, rooflines, links and energy."""

import re

import numpy as np
import pytest

from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config, qwen2_config
from heteroreason.model.timing.device_timing import PRESETS, LlmTiming, timing
from heteroreason.model.timing.energy import DevicePower, device_energy_j, power
from heteroreason.model.timing.gpu import gpu, roofline_check
from heteroreason.model.timing.link import LinkConfig, link
from heteroreason.model.timing.profile_fit import ProfileError, fit_profile, read_profile

HEADER = ("draft_latency_ms,prm_latency_ms,target_latency_ms,draft_output_tokens,"
          "prm_input_tokens,target_output_tokens,draft_calls,prm_calls,target_calls")


def test_decode_sums_the_per_token_cost():
    t = LlmTiming("t", "m", "d", decode_ms_per_token=2.0, decode_ms_per_kv_token=0.01,
                  decode_call_ms=5.0)
    naive = 5.0 + sum(2.0 + 0.01 * (100 + i + 1) for i in range(30))
    assert t.decode_ms(30, 100) == pytest.approx(naive)
    assert t.decode_ms(0, 100) == 0.0
    assert t.ingest_ms(30, 100) == pytest.approx(naive)
    assert t.with_(ingest_ms_per_token=1.0).ingest_ms(2, 0) == pytest.approx(2.0 + 0.03)
    with pytest.raises(ValueError, match=r"^tokens must be a non-negative integer, not -1$"):
        t.decode_ms(-1, 0)
    for value in (-1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match=rf"^bad: decode_ms_per_token must be a finite "
                                             rf"non-negative number, not "
                                             rf"{re.escape(repr(value))}$"):
            LlmTiming("bad", "m", "d", decode_ms_per_token=value)
    with pytest.raises(ValueError, match=r"^bad: ingest_ms_per_token must be a finite "
                                         r"non-negative number \(or None\), not nan$"):
        LlmTiming("bad", "m", "d", decode_ms_per_token=1.0, ingest_ms_per_token=float("nan"))


@pytest.mark.parametrize("seed", range(6))
def test_a_floor_prices_each_token_at_the_larger_of_it_and_the_line(seed):
    """Against a naive loop over the tokens: ``max(floor, per_token + per_kv * kv_i)`` with
    ``kv_i = kv_start + i``, the floor below, across and above the line's start, for decode and
    ingest, and the per-second rate likewise."""
    rng = np.random.default_rng(seed)
    a, b = float(rng.uniform(0.1, 2.0)), float(rng.choice([0.0, rng.uniform(1e-4, 1e-2)]))
    floor = float(rng.uniform(0.0, 4.0))
    t = LlmTiming("t", "m", "d", decode_ms_per_token=a, decode_ms_per_kv_token=b,
                  decode_call_ms=0.25, ingest_ms_per_token=a / 2, decode_floor_ms_per_token=floor,
                  ingest_floor_ms_per_token=floor / 2)
    for tokens, kv_start in ((0, 5), (1, 0), (7, 0), (40, 13), (300, 250), (1000, 0)):
        decode = sum(max(floor, a + b * (kv_start + i)) for i in range(1, tokens + 1))
        ingest = sum(max(floor / 2, a / 2 + b * (kv_start + i)) for i in range(1, tokens + 1))
        assert t.decode_ms(tokens, kv_start) == pytest.approx(
            decode + (0.25 if tokens else 0.0), rel=1e-12, abs=1e-12), f"seed={seed}"
        assert t.ingest_ms(tokens, kv_start) == pytest.approx(ingest, rel=1e-12, abs=1e-12), \
            f"seed={seed}"
    assert t.tokens_per_s(10) == pytest.approx(1000 / max(floor, a + 10 * b))
    assert t.base_decode_ms_per_token == max(floor, a)
    with pytest.raises(ValueError, match=r"^t: decode_floor_ms_per_token must be a finite "
                                         r"non-negative number, not -1$"):
        t.with_(decode_floor_ms_per_token=-1)


def test_presets_reproduce_the_artifact_figures():
    assert timing("fpga/artifact-u280").tokens_per_s() == pytest.approx(174.2, abs=0.1)
    assert timing("config1/target").tokens_per_s() == pytest.approx(51.4, abs=0.1)
    # the artifact simulator's own component checks (simulator_reference.json)
    assert timing("fpga/artifact-u280").decode_ms(10, 0) == pytest.approx(57.53552)
    assert timing("config1/prm").prefill_ms(1000) == pytest.approx(209.29397, abs=1e-3)
    with pytest.raises(KeyError, match=r"^\"unknown timing preset 'fpga/u55'; choose one of "
                                       r"config1/draft, config1/prm, config1/target, "
                                       r"config2/draft, config2/prm, config2/target, "
                                       r"gpu/draft-paper, gpu/draft-vllm-a100, gpu/draft-hf-a100, "
                                       r"fpga/artifact-u280, fpga/artifact-u280-config2, "
                                       r"fpga/artifact-v80\"$"):
        timing("fpga/u55")


def test_model_shapes():
    s = qwen2_config("qwen2.5-0.5b")
    assert s.params == pytest.approx(494e6, rel=0.01)
    assert s.params - s.embedding_params == pytest.approx(358e6, rel=0.01)
    assert s.kv_bytes_per_token(2) == 12288
    assert qwen2_config("qwen2.5-7b").params == pytest.approx(7.62e9, rel=0.01)
    with pytest.raises(ValueError, match=r"^bad: kv_heads \(3\) must divide heads \(4\)$"):
        Qwen2Config("bad", 64, 2, 4, 3, 16, 128, 256, True)


def test_every_gpu_decode_preset_sits_above_its_roofline():
    for t in PRESETS.values():
        if t.device != "rtx3090":
            continue
        for check in roofline_check(t, qwen2_config(t.model), gpu(t.device)):
            if check.what.startswith("decode"):
                assert check.ratio >= 1.0, (t.name, check)


def write_csv(tmp_path, rows, header=HEADER):
    path = tmp_path / "profile.csv"
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_fit_recovers_known_coefficients_despite_outliers(tmp_path):
    rng = np.random.default_rng(5)
    rows = []
    for i in range(600):
        d_out, p_in, t_out = rng.integers(5, 300), rng.integers(50, 2000), rng.integers(0, 200)
        t_calls = int(t_out > 0)
        draft = 6.0 + 4.5 * d_out + rng.normal(0, 3)
        prm = 20.0 + 0.22 * p_in + rng.normal(0, 2)
        target = (45.0 + 6.2 * t_out + rng.normal(0, 4)) if t_calls else 0.0
        if i % 50 == 0:
            draft *= 4  # heavy outliers below the 5 s cut
        rows.append([draft, prm, target, d_out, p_in, t_out, 1, 1, t_calls])
    rows.append([30000.0, 30000.0, 0.0, 10, 10, 0, 1, 1, 0])  # warm-up, dropped
    fits = {f.component: f for f in fit_profile(read_profile(write_csv(tmp_path, rows)))}
    assert fits["draft"].ms_per_token == pytest.approx(4.5, rel=0.02)
    assert fits["draft"].call_ms == pytest.approx(6.0, abs=2.0)
    assert abs(fits["draft"].lstsq_ms_per_token - 4.5) > abs(fits["draft"].ms_per_token - 4.5)
    assert fits["prm"].ms_per_token == pytest.approx(0.22, rel=0.02)
    assert fits["prm"].dropped == 1
    assert fits["target"].ms_per_token == pytest.approx(6.2, rel=0.02)
    assert fits["target"].call_ms == pytest.approx(45.0, rel=0.1)


@pytest.mark.parametrize("content, message", [
    ("", "is empty"),
    (HEADER + "\n", "has a header but no rows"),
    ("draft_latency_ms,prm_latency_ms\n1,2\n", "missing column(s) draft_calls"),
    (HEADER + "\n1,2,3,4,5,6,1,1,x\n", ":2: column 'target_calls' must be a number"),
    (HEADER + "\n1,2,3,4,5,6,1,1,0\n1,2,-3,4,5,6,1,1,0\n",
     ":3: column 'target_latency_ms' must be a finite non-negative number"),
    (HEADER + "\n1,2,3,4,5,6,1,1\n", ":2: column 'target_calls' must be a number, not None"),
])
def test_bad_profiles(tmp_path, content, message):
    path = tmp_path / "p.csv"
    path.write_text(content)
    with pytest.raises(ProfileError) as info:
        read_profile(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_artifact_profiles_fit(artifact):
    folder = artifact / "AE_hardware" / "inputs" / "step_profile_csv" / "config2"
    for path in sorted(folder.glob("*.csv")):
        fits = {f.component: f for f in fit_profile(read_profile(path))}
        assert 4.0 < fits["draft"].ms_per_token < 5.0, path.name
        assert 0.18 < fits["prm"].ms_per_token < 0.26, path.name
        assert 5.5 < fits["target"].ms_per_token < 6.6, path.name
        assert all(f.median_abs_pct_error < 10 for f in fits.values())


def test_links():
    pcie3 = link("pcie3-x16")
    assert pcie3.tokens_ms(100) == pytest.approx(0.001 + 400 / 16e9 * 1e3)
    assert pcie3.transfer_ms(0) == 0.0
    kv = pcie3.kv_migration_ms(qwen2_config("qwen2.5-0.5b"), 141)
    assert kv == pytest.approx(0.001 + 12288 * 141 / 16e9 * 1e3)
    with pytest.raises(ValueError, match=r"^bad: bandwidth_bytes_per_s must be positive, not 0$"):
        LinkConfig("bad", 0, 0.0)
    with pytest.raises(KeyError, match=r"^\"unknown link 'nvlink'; choose one of pcie3-x16, "
                                       r"pcie4-x16, pcie5-x8, pcie5-x16, ideal\"$"):
        link("nvlink")


def test_energy():
    gpu7b = power("rtx3090-7b")
    assert device_energy_j(gpu7b, busy_ms=1000, total_ms=3000) == pytest.approx(349 + 350)
    with pytest.raises(ValueError, match=r"^busy time 10 ms exceeds the total 5 ms$"):
        device_energy_j(gpu7b, busy_ms=10, total_ms=5)
    with pytest.raises(ValueError, match=r"^bad: active_w must be a finite non-negative number, "
                                         r"not -1\.0$"):
        DevicePower("bad", -1.0, 0.0)
    with pytest.raises(ValueError, match=r"^bad: idle_w must be a finite non-negative number, "
                                         r"not inf$"):
        DevicePower("bad", 1.0, float("inf"))
    with pytest.raises(KeyError, match=r"^\"unknown device power preset 'a100'; choose one of "
                                       r"rtx3090-7b, rtx3090-1\.5b, rtx3090-0\.5b\"$"):
        power("a100")


def _profile(rows):
    from heteroreason.model.timing.profile_fit import REQUIRED

    columns = {c: [] for c in REQUIRED}
    for row in rows:
        for c in REQUIRED:
            columns[c].append(float(row.get(c, 0)))
    return {c: np.asarray(v) for c, v in columns.items()}


def test_fits_refuse_what_the_rows_cannot_identify():
    collinear = _profile([{"draft_latency_ms": 10 * k, "draft_calls": k,
                           "draft_output_tokens": 2 * k} for k in (1, 2, 3)])
    with pytest.raises(ProfileError, match=r"^no component can be fitted: draft: its calls and "
                                           r"tokens are proportional in every row \(collinear\); "
                                           r"prm: it never ran; target: it never ran$"):
        fit_profile(collinear)
    few = _profile([{"prm_latency_ms": 20, "prm_calls": 1, "prm_input_tokens": 10},
                    {"prm_latency_ms": 30, "prm_calls": 1, "prm_input_tokens": 50}])
    with pytest.raises(ProfileError, match=r"^no component can be fitted: draft: it never ran; "
                                           r"prm: 2 row\(s\) left, at least 3 needed; target: "
                                           r"it never ran$"):
        fit_profile(few)
    for bad in (float("nan"), float("inf"), 0.0):
        with pytest.raises(ValueError, match=r"^max_latency_ms must be a finite positive "
                                             rf"number, not {bad!r}$"):
            fit_profile(few, max_latency_ms=bad)


def test_fits_report_the_uncertainty_of_their_coefficients():
    rng = np.random.default_rng(3)
    rows = []
    for _ in range(200):
        calls, tokens = int(rng.integers(1, 3)), int(rng.integers(5, 200))
        rows.append({"target_latency_ms": 40 * calls + 6 * tokens + rng.normal(0, 5),
                     "target_calls": calls, "target_output_tokens": tokens})
    (fit,) = fit_profile(_profile(rows))
    assert abs(fit.ms_per_token - 6) < 3 * fit.ms_per_token_stderr + 0.05
    assert 0 < fit.ms_per_token_stderr < 0.05 and 0 < fit.call_ms_stderr < 5
