"""The GPU presets fitted from measured step profiles: the fits recover known coefficients,
keep a KV term only where the rows support one, are cross-validated between datasets, and the
presets state exactly what a refit of the artifact's profiles gives (with its source)."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from heteroreason.model.system.config import system_config
from heteroreason.model.timing.device_timing import MEASURED_PROFILES, timing
from heteroreason.model.timing.measured_gpu import fit_roles, significant
from heteroreason.model.timing.profile_fit import ProfileError, read_profile

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "device_models.py"
COLUMNS = ("draft_latency_ms", "prm_latency_ms", "target_latency_ms", "draft_input_tokens",
           "draft_output_tokens", "prm_input_tokens", "target_input_tokens",
           "target_output_tokens", "draft_calls", "prm_calls", "target_calls")


def synthetic(seed, rows=2000, *, draft_kv=2e-4, target_kv=0.0):
    """Columns of a profile from known coefficients (draft 7 + 4.5/token + draft_kv per KV
    entry, PRM 20 + 0.2/token, target 50 + 6/token + target_kv) with 3 % noise."""
    rng = np.random.default_rng(seed)
    calls = rng.integers(1, 5, rows).astype(float)
    out = rng.integers(5, 300, rows).astype(float)
    context = rng.integers(50, 3000, rows).astype(float)
    kv = out * context + out * (out + 1) / 2
    prm_in = context + out
    t_calls = (rng.random(rows) < 0.5).astype(float)
    t_out = t_calls * rng.integers(5, 200, rows)
    t_kv = t_out * context + t_out * (t_out + 1) / 2
    noise = lambda: 1 + 0.03 * rng.standard_normal(rows)  # noqa: E731
    return {
        "draft_latency_ms": (7 * calls + 4.5 * out + draft_kv * kv) * noise(),
        "prm_latency_ms": (20 * calls + 0.2 * prm_in) * noise(),
        "target_latency_ms": (50 * t_calls + 6 * t_out + target_kv * t_kv) * noise(),
        "draft_input_tokens": context, "draft_output_tokens": out, "prm_input_tokens": prm_in,
        "target_input_tokens": context, "target_output_tokens": t_out, "draft_calls": calls,
        "prm_calls": calls, "target_calls": t_calls}


def write(path, columns):
    lines = [",".join(COLUMNS)] + [",".join(f"{columns[c][i]:.6f}" for c in COLUMNS)
                                   for i in range(len(columns[COLUMNS[0]]))]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fits_recover_known_coefficients_and_keep_only_a_supported_kv_term():
    fits = fit_roles({"a": synthetic(1), "b": synthetic(2)})
    draft, prm, target = fits["draft"], fits["prm"], fits["target"]
    assert draft.call_ms == pytest.approx(7, rel=0.2)
    assert draft.ms_per_token == pytest.approx(4.5, rel=0.03)
    assert draft.ms_per_kv_token == pytest.approx(2e-4, rel=0.05)
    assert draft.kv_note.startswith("kept")
    assert prm.call_ms == pytest.approx(20, rel=0.1) and prm.ms_per_token == pytest.approx(0.2,
                                                                                          rel=0.03)
    assert prm.ms_per_kv_token == 0
    # the target's rows were made without a KV term: the fit leaves it out, and says why
    assert target.ms_per_kv_token == 0 and target.kv_note.startswith("dropped")
    assert target.ms_per_token == pytest.approx(6, rel=0.03)
    assert {(c.fitted_on, c.tested_on) for c in draft.cross} == {("a", "b"), ("b", "a")}
    assert all(c.median_abs_pct_error < 5 for f in fits.values() for c in f.cross)
    assert draft.rows == {"a": 2000, "b": 2000}


def test_the_datasets_order_does_not_change_the_fit():
    a, b = synthetic(3), synthetic(4)
    assert fit_roles({"x": a, "y": b}) == fit_roles({"y": b, "x": a})


def test_bad_fits_are_refused(tmp_path):
    with pytest.raises(ProfileError, match=r"^a cross-validated fit needs profiles of at least "
                                           r"two datasets, not 1$"):
        fit_roles({"a": synthetic(1)})
    lacking = {k: v for k, v in synthetic(2).items() if k != "target_input_tokens"}
    with pytest.raises(ProfileError, match=r"^b: the target's KV term needs column "
                                           r"'target_input_tokens', which the profile lacks$"):
        fit_roles({"a": synthetic(1), "b": lacking})
    few = {k: v[:3] for k, v in synthetic(5, rows=3).items()}
    with pytest.raises(ProfileError, match=r"^b: the draft's 3 coefficients cannot be told "
                                           r"apart on its 3 rows$"):
        fit_roles({"a": synthetic(1), "b": few})
    with pytest.raises(ValueError, match=r"^max_latency_ms must be a finite positive number, "
                                         r"not 0$"):
        fit_roles({"a": synthetic(1), "b": synthetic(2)}, max_latency_ms=0)


def test_significant_digits():
    assert significant(0.000112549) == 0.0001125
    assert significant(50.7449) == 50.74
    assert significant(0.0) == 0.0


def test_the_presets_are_the_fits_of_the_artifacts_profiles(artifact):
    folder = artifact / "AE_hardware" / "inputs" / "step_profile_csv" / "config2"
    profiles = {name: read_profile(next(folder.glob(f"*{name}*.csv")))
                for name in ("math500", "gsm8k")}
    fits = fit_roles(profiles)
    for preset, role in (("config1/draft", "draft"), ("config2/draft", "draft"),
                         ("config2/prm", "prm"), ("config2/target", "target")):
        t, f = timing(preset), fits[role]
        if role == "prm":
            got = (t.prefill_call_ms, t.prefill_ms_per_token, 0.0)
        else:
            got = (t.decode_call_ms, t.decode_ms_per_token, t.decode_ms_per_kv_token)
        assert got == (significant(f.call_ms), significant(f.ms_per_token),
                       significant(f.ms_per_kv_token)), preset
        assert t.source.startswith(f.source(MEASURED_PROFILES)), preset
    # the goal of the fit: every role within 11 % on the dataset it was not fitted on
    assert all(f.worst_cross_pct < 11 for f in fits.values())


def test_the_paper_draft_is_a_named_choice_never_the_default():
    assert system_config("config1").draft_gpu.name == "config1/draft"
    paper = system_config("config1", gpu_draft="paper").draft_gpu
    assert (paper.decode_ms_per_token, paper.decode_call_ms) == (8.0, 0.0)
    assert paper.source.startswith("the paper's claim")
    with pytest.raises(ValueError, match=r"^unknown GPU draft model 'fast'; choose one of "
                                         r"measured, paper, vllm-a100, hf-a100$"):
        system_config("config2", gpu_draft="fast")


def test_the_cli_prints_the_fits_and_refuses_one_dataset(tmp_path):
    files = [write(tmp_path / f"{n}_step_profile.csv", synthetic(s))
             for n, s in (("math500", 1), ("gsm8k", 2))]
    run = subprocess.run([sys.executable, str(SCRIPT), "measured", *map(str, files)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "cross-validated median |err| %" in run.stdout
    assert "draft: Huber fit of" in run.stdout
    one = subprocess.run([sys.executable, str(SCRIPT), "measured", str(files[0])],
                         capture_output=True, text=True)
    assert one.returncode == 2
    assert "at least two datasets, not 1" in one.stderr


def test_the_fits_file_is_what_the_presets_read_and_what_the_fitter_writes(tmp_path):
    """The presets' measured coefficients come from the data file (none typed by hand), and
    the fitter's file reads back as written."""
    from heteroreason.model.timing.gpu_fits import GPU_FITS_FILE, load_gpu_fits, write_gpu_fits

    fits = load_gpu_fits()
    assert (timing("config1/draft").decode_ms_per_token, timing("config2/target").decode_call_ms,
            timing("config2/prm").prefill_ms_per_token) == \
        (fits["draft"].ms_per_token, fits["target"].call_ms, fits["prm"].ms_per_token)
    assert timing("config2/prm").source == fits["prm"].source
    copy = write_gpu_fits(fits, MEASURED_PROFILES, tmp_path / "fits.json")
    assert load_gpu_fits(copy) == fits
    assert copy.read_text() == GPU_FITS_FILE.read_text()


@pytest.mark.parametrize("edit, message", [
    (lambda o: o.update(format="x"), "not a GPU fits file"),
    (lambda o: o["roles"].pop("prm"), "field 'roles.prm' is missing"),
    (lambda o: o["roles"]["draft"].update(ms_per_token=float("nan")),
     "field 'roles.draft.ms_per_token' must be a finite non-negative number of ms, not nan"),
    (lambda o: o["roles"]["target"].update(source=""),
     "field 'roles.target.source' must be a non-empty string"),
])
def test_a_malformed_fits_file_is_refused_naming_the_field(tmp_path, edit, message):
    import json

    from heteroreason.model.files import InputError
    from heteroreason.model.timing.gpu_fits import GPU_FITS_FILE, load_gpu_fits

    obj = json.loads(GPU_FITS_FILE.read_text())
    edit(obj)
    path = tmp_path / "fits.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(InputError, match=re.escape(message)):
        load_gpu_fits(path)
