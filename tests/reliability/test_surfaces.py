"""The remaining command-line and API surfaces of the reliability audit (issue 40): every program
that writes an output does it whole or absent, one writer at a time; an error status discards what
a run staged; sizes are bounded before any work; the API names the parameter it refuses; a fit
says which component it could not fit."""

import gc
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from reliability_cases import sigint_as_at_a_terminal

from heteroreason.commands.common import in_stage


def _heteroreason(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "heteroreason", *map(str, args)],
                          capture_output=True, text=True, **kwargs)


def _hidden(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_an_error_status_discards_what_the_run_staged(tmp_path):
    def failing(stage):
        (stage / "half.csv").write_text("half")
        return 2

    def failed_check(stage):  # status 1: a check failed, what was measured is kept
        (stage / "measured.csv").write_text("kept")
        return 1

    assert in_stage(tmp_path / "out", failing) == 2
    assert list(tmp_path.iterdir()) == []
    assert in_stage(tmp_path / "out", failed_check) == 1
    assert (tmp_path / "out" / "measured.csv").read_text() == "kept"
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("sent, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_trace_generation_leaves_the_previous_files(tmp_path, sent, status):
    out = tmp_path / "traces"
    out.mkdir()
    (out / "gsm8k.jsonl").write_text("a previous run's traces\n")
    with subprocess.Popen([sys.executable, "-m", "heteroreason", "traces", "generate",
                           "--dataset", "all", "--problems", "1000000", "--seed", "1",
                           "--out", str(out)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          preexec_fn=sigint_as_at_a_terminal) as proc:
        staging = []
        while not staging:  # the run writes into its staging folder: interrupt it there
            assert proc.poll() is None, proc.stderr.read()
            staging = [p for p in tmp_path.glob(".traces.*.staging") if any(p.iterdir())]
            time.sleep(0.02)
        proc.send_signal(sent)
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == status, err
    assert "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["gsm8k.jsonl"]
    assert (out / "gsm8k.jsonl").read_text() == "a previous run's traces\n"
    assert _hidden(tmp_path) == []


def test_a_second_trace_writer_is_refused(tmp_path):
    out = tmp_path / "traces"
    (tmp_path / ".traces.lock").write_text(f"{os.getpid()}\n")  # a live process holds it
    proc = _heteroreason("traces", "generate", "--dataset", "gsm8k", "--problems", "3",
                         "--seed", "1", "--out", out)
    assert proc.returncode == 2
    assert f"--out: {out} is being written by another run (process {os.getpid()}" in \
        proc.stderr
    assert not out.exists()


def test_a_trace_generation_that_fails_leaves_nothing(tmp_path):
    proc = _heteroreason("traces", "generate", "--dataset", "all", "--problems", "3",
                         "--seed", "1", "--max-context", "300", "--out", tmp_path / "t")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    # math500 and gsm8k were written before gaokao2023en's first problem outgrew the context
    assert "heteroreason traces: error: dataset gaokao2023en: " in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, message", [
    (["brsd", "--count", "101"], "--count must be an integer in [1, 100]"),
    (["brsd", "--count", "1", "--max-steps", "1000", "--max-step-tokens", "1000"],
     "a prompt of 16 tokens plus --max-steps x --max-step-tokens (1000 x 1000 = 1000000) "
     "must fit test-tiny's context of 512 tokens"),
    (["numerics", "--positions", "999999999999"], "--positions must be an integer in [1, 512]"),
    (["rtl-checks", "--events", "9999999999999"], "--events must be an integer in "
                                                  "[5,000, 1,000,000]"),
    (["rtl-checks", "--events", "1000"], "--events must be an integer in [5,000, 1,000,000] "
                                         "(fewer random events miss the tests' coverage "
                                         "goals), not 1000"),
    (["rtl-checks", "--seed", "-1"], "--seed must be a non-negative integer"),
    (["timing", "--top", "mvu", "--yosys", "/nonexistent/yosys"],
     "--yosys: /nonexistent/yosys is not an executable program"),
    (["timing", "--top", "mvu", "--lanes", "0"],
     "heteroreason timing: error: top 'mvu': lanes must be an integer in [1, 4,096], not 0"),
    (["timing", "--set", "small", "--workers", "100000"],
     "--workers must be an integer in [1, 64], not 100000"),
    (["reproduce", "--workers", "65"], "--workers must be an integer in [1, 64], not 65"),
    (["fleet", "sweep", "--workers", "100000"], "100000 must be in [1, 64] (processes)"),
    (["bench", "fleet", "--slo", "inf"], "argument --slo: inf must be a finite number > 0"),
    (["export", "--top", "decoder_core", "--weight-buffer", "99999999999"],
     "parameter 'weight_buffer' of top 'decoder_core' must be at most 1,048,576"),
    (["export", "--top", "decoder_core", "--param", "kv_rows=1024"],
     "top 'decoder_core': kv_rows must be a power of two <= 64, not 1024"),
    (["export", "--top", "attention", "--param", "kv_rows=32"],
     "top 'attention': kv_rows (32) must divide max_context (48)"),
])
def test_sizes_are_refused_before_any_work(tmp_path, args, message):
    """Each of these hung, ran out of memory or escaped as a traceback."""
    out = tmp_path / "out"
    needs_out = args[0] in ("brsd", "rtl-checks", "export", "fleet", "reproduce")
    proc = _heteroreason(*args, *(["--out", out] if needs_out else []), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists()


def test_a_validation_of_nothing_is_an_error(tmp_path):
    artifact = tmp_path / "artifact"
    (artifact / "AE_hardware" / "inputs" / "step_profile_csv" / "config2").mkdir(parents=True)
    proc = _heteroreason("validate", "--artifact", artifact, "--out", tmp_path / "v")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{artifact} holds none of the data any section checks" in proc.stderr
    assert not (tmp_path / "v").exists()


def _profile_csv(path, rows, extra=""):
    header = ("example_idx,draft_latency_ms,prm_latency_ms,target_latency_ms,"
              "draft_output_tokens,prm_input_tokens,target_output_tokens,draft_calls,prm_calls,"
              "target_calls" + extra)
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_a_profile_column_or_cell_that_is_not_known_is_refused(tmp_path):
    from heteroreason.model.timing.profile_fit import ProfileError, read_profile

    row = "0,10,20,30,5,50,4,1,1,1"
    with pytest.raises(ProfileError, match=r"unknown column 'draft_latency_msx'; a step "
                                           r"profile's columns are dataset, draft_calls"):
        read_profile(_profile_csv(tmp_path / "a.csv", [row], extra=",draft_latency_msx"))
    with pytest.raises(ProfileError, match=r"b.csv:3: has 11 fields, the header 10$"):
        read_profile(_profile_csv(tmp_path / "b.csv", [row, row + ",7"]))


def test_a_fit_says_which_component_it_could_not_fit(tmp_path):
    from heteroreason.model.timing.profile_fit import (
        fit_profile,
        read_profile,
        unfitted_components,
    )

    rng = np.random.default_rng(5)
    rows = []
    for i in range(40):  # the target varies; the draft's tokens are proportional to its calls
        calls, tokens = int(rng.integers(1, 4)), int(rng.integers(5, 200))
        rows.append(f"{i},{12 * calls:.1f},0,{40 * calls + 6 * tokens:.1f},{8 * calls},0,"
                    f"{tokens},{calls},0,{calls}")
    path = _profile_csv(tmp_path / "p.csv", rows)
    fits = fit_profile(read_profile(path))
    assert [f.component for f in fits] == ["target"]
    assert unfitted_components(read_profile(path)) == {
        "draft": "its calls and tokens are proportional in every row (collinear)",
        "prm": "it never ran"}
    proc = _heteroreason("devices", "fit", path)
    assert proc.returncode == 0, proc.stderr
    assert "  draft: not fitted (its calls and tokens are proportional in every row " \
           "(collinear))" in proc.stdout
    assert "  prm: not fitted (it never ran)" in proc.stdout


def test_an_artifact_coefficient_must_be_finite(tmp_path):
    from heteroreason.model.experiments.artifact_semantics import read_artifact_config
    from heteroreason.model.files import InputError

    path = tmp_path / "config1.json"
    path.write_text('{"semantics": "x", "parameters_ms": {"draft_per_token": NaN}}')
    with pytest.raises(InputError, match=r"parameters_ms.draft_per_token must be a finite "
                                         r"non-negative number, not nan$"):
        read_artifact_config(path)


@pytest.mark.parametrize("stamps, message", [
    ((0.0, float("nan")), r"^arrival timestamps_s\[1\] must be a finite number in \[0, 1e\+09\]"),
    ((0.0, 2.0, 1.0), r"^arrival timestamps_s\[2\] \(1.0\) is before the previous one \(2.0\)"),
    ((-1.0,), r"^arrival timestamps_s\[0\] must be a finite number in \[0, 1e\+09\]"),
])
def test_arrival_timestamps_are_checked_by_the_api_too(stamps, message):
    from heteroreason.model.fleet.workload import ArrivalKind, Arrivals

    with pytest.raises(ValueError, match=message):
        Arrivals(ArrivalKind.TRACE, timestamps_s=stamps)
    with pytest.raises(ValueError, match=r"^arrival rate_per_s must be a finite number in "
                                         r"\[0.0001, 10000\]"):
        Arrivals.poisson(1e-300)


@pytest.mark.parametrize("call, error, message", [
    (lambda hr: hr.draft_ms_per_token("u280-300", model=None), TypeError,
     r"^model must be a name \(str\), not None$"),
    (lambda hr: hr.load_traces(None), TypeError,
     r"^path must be a path \(str or os.PathLike\), not None$"),
    (lambda hr: hr.simulate(None, "t2"), TypeError,
     r"^traces must be a sequence of ProblemTrace, not NoneType$"),
    (lambda hr: hr.verdict(configs=[]), ValueError,
     r"^configs must be a non-empty sequence of names, not \[\]$"),
    (lambda hr: hr.verdict(configs="config1"), ValueError,
     r"^configs must be a non-empty sequence of names, not 'config1'$"),
    (lambda hr: hr.fleet(pools=(2, 1)), ValueError,
     r"^pools must be three pool sizes \(drafts, PRMs, targets\), not \(2, 1\)$"),
    (lambda hr: hr.fleet(pools=(10**6, 1, 1)), ValueError,
     r"^pool size drafts must be an integer in \[1, 1,024\], not 1000000$"),
    (lambda hr: hr.fleet(problems=10**9), ValueError,
     r"^problems must be an integer in \[1, 1,000,000\], not 1000000000$"),
    (lambda hr: hr.fleet(problems=2.5), ValueError,
     r"^problems must be an integer in \[1, 1,000,000\], not 2.5$"),
    (lambda hr: hr.fleet(slo_s=float("inf")), ValueError,
     r"^slo_s must be a finite number in \[0.001, 86400\] \(seconds, or None\), not inf$"),
    (lambda hr: hr.export_verilog("kvmu", None), TypeError,
     r"^out_dir must be a path \(str or os.PathLike\), not None$"),
    (lambda hr: hr.run_bench("kvmu", events=0), ValueError,
     r"^events must be an integer in \[5,000, 1,000,000\] \(fewer random events miss the "
     r"tests' coverage goals\), not 0$"),
    (lambda hr: hr.run_bench("kvmu", seed=-1), ValueError,
     r"^seed must be a non-negative integer, not -1$"),
])
def test_the_api_names_the_parameter_it_refuses(call, error, message):
    """Each of these escaped as a low-level TypeError or AttributeError, hung, or ran."""
    from amaranth.hdl import Fragment

    import heteroreason as hr
    from heteroreason.rtl.kvmu import Kvmu

    # Amaranth stays silent about unused blocks until something has been elaborated: elaborate
    # one, so that a block the call built before refusing warns (an error here) at the collect
    Fragment.get(Kvmu(capacity=2), None)
    with pytest.raises(error, match=message):
        call(hr)
    gc.collect()
