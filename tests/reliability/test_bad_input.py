"""The project's bad-input suite (issue 18): every family of malformed input a hostile user
tried, each case asserting a clear error that names the file, line, field or parameter, and for
the programs exit status 2 with nothing written. ``tests/reliability/test_fuzz.py`` adds
property-based cases (Hypothesis) to the catalogued ones here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from reliability_cases import TRACE_CASES, broken, valid_problem

from heteroreason.model.system.simulate import simulate
from heteroreason.model.timing.profile_fit import REQUIRED, ProfileError, fit_profile, read_profile
from heteroreason.model.workload.traces import (
    ProblemTrace,
    StepEvent,
    TraceError,
    check_trace,
    load_traces,
)
from heteroreason.sim.flow.export import TOPS, ExportError, build_top, parse_params
from heteroreason.sim.verify.runner import build_dir_for, run_cocotb

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def write_lines(path: Path, *objs) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


def test_the_catalogue_starts_from_a_valid_problem(tmp_path):
    (trace,) = load_traces(write_lines(tmp_path / "ok.jsonl", valid_problem()))
    assert [s.outcome.value for s in trace.steps] == ["accept", "rescue", "accept", "backtrack"]
    assert trace.accepted_chain() == [10, 7]


# --- family 1: a trace line that breaks the format's rules (file, line and field named) ------

@pytest.mark.parametrize("case", TRACE_CASES, ids=[c[0] for c in TRACE_CASES])
def test_a_broken_trace_line_names_file_line_and_field(tmp_path, case):
    _, mutation, field, reason = case
    path = write_lines(tmp_path / "t.jsonl", valid_problem(), broken(mutation))
    with pytest.raises(TraceError) as info:
        load_traces(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2"), message
    if field is not None:
        assert f"field '{field}'" in message, message
    assert reason in message, message


# --- family 2: files that are not traces at all ----------------------------------------------

FILE_CASES = [
    ("not-utf8", b'{"dataset": "m\xe9th"}\n', ":1", "is not UTF-8 text (byte 0xe9 at column 15)"),
    ("not-utf8-line-3", b"\n\n\xff\n", ":3", "is not UTF-8 text (byte 0xff at column 1)"),
    ("bad-json", b'{"dataset": "math500",\n', ":1", "is not valid JSON"),
    ("duplicate-key", b'{"dataset": "a", "dataset": "b"}\n', ":1", "duplicate key 'dataset'"),
    ("empty", b"", "", "holds no problems"),
    ("blank-lines-only", b"\n  \n\n", "", "holds no problems"),
    ("array", b"[1, 2]\n", ":1", "a problem must be a JSON object"),
    ("number", b"17\n", ":1", "a problem must be a JSON object"),
    ("string", b'"steps"\n', ":1", "a problem must be a JSON object"),
    ("truncated-second-line", json.dumps(valid_problem()).encode() + b"\n{\"dataset\n", ":2",
     "is not valid JSON"),
]


@pytest.mark.parametrize("name, content, where, reason", FILE_CASES,
                         ids=[c[0] for c in FILE_CASES])
def test_a_file_that_is_not_a_trace(tmp_path, name, content, where, reason):
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        load_traces(path)
    assert str(info.value).startswith(f"{path}{where}:"), str(info.value)
    assert reason in str(info.value)


@pytest.mark.parametrize("kind", ["missing", "folder"])
def test_a_path_that_cannot_be_read(tmp_path, kind):
    path = tmp_path / "t.jsonl"
    if kind == "folder":
        path.mkdir()
    with pytest.raises(TraceError, match=r"t\.jsonl: cannot be read"):
        load_traces(path)


# --- family 3: traces built in Python reach the simulator only as the loader would take them

def accept(n=5):
    return StepEvent("accept", n)


API_CASES = [
    ("accept-without-tokens", (StepEvent("accept", 0),), "draft_tokens", "at least one token"),
    ("rescue-without-target", (accept(), StepEvent("rescue", 4, 0)), "target_tokens",
     "at least one target token"),
    ("backtrack-beyond-start", (accept(), StepEvent("backtrack", 3, 2, backtrack_steps=2)),
     "backtrack_steps", "only 1 accepted steps"),
    ("negative-tokens", (StepEvent("accept", -4),), "draft_tokens", "at least 0"),
    ("float-tokens", (StepEvent("accept", 4.5),), "draft_tokens", "must be an integer"),
    ("score-out-of-range", (StepEvent("accept", 4, draft_score=1.5),), "draft_score",
     "[0, 1]"),
    ("accept-with-target", (StepEvent("accept", 4, 3),), "target_tokens", "no target tokens"),
    ("rescue-with-regenerated", (accept(), StepEvent("rescue", 4, 2, regenerated_tokens=3)),
     "regenerated_tokens", "is not used by rescue steps"),
    ("no-steps", (), "steps", "non-empty list"),
    ("over-budget", tuple([accept()] + [StepEvent("backtrack", 1, 1, backtrack_steps=1,
                                                  regenerated_tokens=1)] * 6),
     "outcome", "budget of 5"),
]


@pytest.mark.parametrize("name, steps, field, reason", API_CASES, ids=[c[0] for c in API_CASES])
def test_a_hand_built_trace_is_refused_before_the_replay(name, steps, field, reason):
    trace = ProblemTrace("toy", "p1", 50, steps)
    with pytest.raises(TraceError) as info:
        simulate([trace], "config1", "heteroreason")
    message = str(info.value)
    assert message.startswith("problem 'p1' (toy)"), message
    assert f"field '{field}'" in message and reason in message, message


@pytest.mark.parametrize("prompt", [0, -1, 2.5, "100"])
def test_a_hand_built_prompt_is_checked(prompt):
    with pytest.raises(TraceError, match="field 'prompt_tokens'"):
        check_trace(ProblemTrace("toy", "p1", prompt, (accept(),)))


@pytest.mark.parametrize("steps", [[{"outcome": "accept"}], ("accept",), None])
def test_steps_that_are_not_step_events(steps):
    with pytest.raises((TraceError, TypeError), match=r"steps|StepEvent"):
        check_trace(ProblemTrace("toy", "p1", 10, steps))


@pytest.mark.parametrize("outcome", ["reject", "", None, 3])
def test_a_step_with_an_unknown_outcome(outcome):
    with pytest.raises(ValueError, match=r"^outcome must be one of accept, rescue, backtrack"):
        StepEvent(outcome, 3)


@pytest.mark.parametrize("bad", ["not a trace", 7, None])
def test_the_simulator_takes_only_traces(bad):
    with pytest.raises(TypeError, match="expected a ProblemTrace"):
        simulate([bad], "config1", "heteroreason")


@pytest.mark.parametrize("config, mode, message", [
    ("config3", "heteroreason", "unknown config 'config3'"),
    ("config1", "fastest", "fastest"),
])
def test_the_simulator_names_a_bad_config_or_mode(config, mode, message):
    with pytest.raises((ValueError, KeyError), match=message):
        simulate([ProblemTrace("toy", "p1", 10, (accept(),))], config, mode)


# --- family 4: profile CSVs (file, line, column) and fits that cannot be identified -----------

HEADER = ",".join(REQUIRED)


def profile_row(**values) -> str:
    base = {c: 1.0 for c in REQUIRED}
    return ",".join(str(values.get(c, base[c])) for c in REQUIRED)


PROFILE_CASES = [
    ("empty", "", "is empty (no header line)"),
    ("header-only", HEADER + "\n", "has a header but no rows"),
    ("missing-column", ",".join(REQUIRED[1:]) + "\n1\n", f"missing column(s) {REQUIRED[0]}"),
    ("text-cell", HEADER + "\n" + profile_row(draft_calls="two") + "\n",
     ":2: column 'draft_calls' must be a number, not 'two'"),
    ("empty-cell", HEADER + "\n" + profile_row(prm_latency_ms="") + "\n",
     ":2: column 'prm_latency_ms' must be a number"),
    ("negative", HEADER + "\n" + profile_row() + "\n" + profile_row(target_calls=-1) + "\n",
     ":3: column 'target_calls' must be a finite non-negative number"),
    ("nan", HEADER + "\n" + profile_row(draft_latency_ms="nan") + "\n",
     ":2: column 'draft_latency_ms' must be a finite"),
    ("inf", HEADER + "\n" + profile_row(prm_input_tokens="inf") + "\n",
     ":2: column 'prm_input_tokens' must be a finite"),
    ("short-row", HEADER + "\n1,2\n", ":2: column"),
]


@pytest.mark.parametrize("name, text, message", PROFILE_CASES, ids=[c[0] for c in PROFILE_CASES])
def test_a_broken_profile_names_file_line_and_column(tmp_path, name, text, message):
    path = tmp_path / "profile.csv"
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        read_profile(path)
    assert str(info.value).startswith(str(path)) and message in str(info.value), str(info.value)


def test_a_profile_that_is_not_utf8(tmp_path):
    path = tmp_path / "profile.csv"
    path.write_bytes(HEADER.encode() + b"\n\x80\n")
    with pytest.raises(ProfileError, match=r"profile\.csv:2: is not UTF-8 text"):
        read_profile(path)


def columns(rows: int, *, calls=None, tokens=None, latency=None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    out = {}
    for lat, c, t in (("draft_latency_ms", "draft_calls", "draft_output_tokens"),
                      ("prm_latency_ms", "prm_calls", "prm_input_tokens"),
                      ("target_latency_ms", "target_calls", "target_output_tokens")):
        out[c] = np.asarray(calls if calls is not None else rng.integers(1, 4, rows), float)
        out[t] = np.asarray(tokens if tokens is not None else rng.integers(5, 90, rows), float)
        out[lat] = np.asarray(latency if latency is not None else 20 * out[c] + 0.5 * out[t],
                              float)
    return out


@pytest.mark.parametrize("name, cols, reason", [
    ("two-rows", columns(2), "2 row(s) left, at least 3 needed"),
    ("collinear", columns(6, calls=[1] * 6, tokens=[40] * 6, latency=[60] * 6), "collinear"),
    ("proportional", columns(4, calls=[1, 2, 3, 4], tokens=[10, 20, 30, 40],
                             latency=[15, 30, 45, 60]), "collinear"),
    ("never-ran", columns(5, calls=[0] * 5), "it never ran"),
    ("all-above-the-cut", columns(5, latency=[9000.0] * 5), "0 row(s) left"),
])
def test_a_fit_refuses_what_it_cannot_identify(name, cols, reason):
    with pytest.raises(ProfileError) as info:
        fit_profile(cols)
    for component in ("draft", "prm", "target"):
        assert f"{component}: " in str(info.value)
    assert reason in str(info.value)


@pytest.mark.parametrize("cut", [float("nan"), float("inf"), 0, -5.0, True, "5000"])
def test_a_fit_refuses_a_latency_cut_out_of_range(cut):
    with pytest.raises(ValueError, match="max_latency_ms must be a finite positive number"):
        fit_profile(columns(5), max_latency_ms=cut)


# --- family 5: export parameters, checked before elaboration -----------------------------------

def integer_params():
    # parameters for which 0 is a legal value: seeds, the sampler's and decoder's token marks,
    # the KV cache's placement flag, and -1 for no second delimiter
    zero_ok = {"seed", "delimiter", "delimiter2", "eos", "external_kv"}
    for top, spec in TOPS.items():
        for name, default in spec.defaults.items():
            if isinstance(default, int) and name not in zero_ok:
                yield top, name


INTEGER_PARAMS = list(integer_params())


@pytest.mark.parametrize("top, name", INTEGER_PARAMS, ids=[f"{t}.{n}" for t, n in INTEGER_PARAMS])
def test_every_size_parameter_has_a_lower_and_an_upper_bound(top, name):
    for value in (0, -1, 2**40):
        with pytest.raises(ExportError) as info:
            build_top(top, {name: value})
        assert str(info.value).startswith(f"parameter {name!r} of top {top!r}") or \
            (str(info.value).startswith(f"top {top!r}: ") and name in str(info.value)), \
            (value, str(info.value))


@pytest.mark.parametrize("text, message", [
    ("lanes", "must be written NAME=VALUE"),
    ("=8", "must be written NAME=VALUE"),
    ("lane=8", "unknown parameter 'lane' for top 'mvu'"),
    ("lanes=eight", "parameter 'lanes' of top 'mvu' must be an integer, not 'eight'"),
    ("lanes=8.0", "must be an integer, not '8.0'"),
])
def test_a_malformed_parameter_assignment(text, message):
    with pytest.raises(ExportError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_params("mvu", [text])


def test_an_unknown_top():
    with pytest.raises(ExportError, match="unknown top 'gpu'"):
        parse_params("gpu", [])


# --- family 6: the programs (exit 2, the message, nothing written) ---------------------------

@pytest.mark.parametrize("script, args, message", [
    ("traces.py", ["validate", "{bad}"], "{bad}:1: steps[0]: field 'draft_tokens'"),
    ("reproduce.py", ["--traces", "{bad}", "--no-plots", "--out", "{out}"],
     "{bad}:1: steps[0]: field 'draft_tokens'"),
    ("export_verilog.py", ["--top", "mvu", "--param", "lanes=1048576", "--out", "{out}"],
     "must be at most 4,096"),
    ("export_verilog.py", ["--top", "sampler", "--param", "vocab=0", "--out", "{out}"],
     "vocab"),
    ("timing_report.py", ["--top", "kvmu", "--ecp5", "--part", "12k"], "12k"),
    ("device_models.py", ["fit", "{profile}"], "profile.csv:2: column 'draft_calls'"),
    # a valid trace whose prompt and first step need 4,090 + 10 tokens: beyond the PRM
    ("reproduce.py", ["--traces", "{long}", "--no-plots", "--out", "{out}"],
     "problem 7 (math500) step 0: needs 4100 tokens of context"),
])
def test_a_program_exits_2_naming_the_problem(tmp_path, script, args, message):
    bad = write_lines(tmp_path / "bad.jsonl", broken(lambda o: o["steps"][0].update(
        draft_tokens=-1)))
    long = write_lines(tmp_path / "long.jsonl", broken(lambda o: o.update(prompt_tokens=4090)))
    profile = tmp_path / "profile.csv"
    profile.write_text(HEADER + "\n" + profile_row(draft_calls="x") + "\n")
    names = {"bad": bad, "long": long, "out": tmp_path / "out", "profile": profile}
    proc = run(script, *(a.format(**names) for a in args))
    assert proc.returncode == 2, proc.stderr
    assert message.format(**names) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("separator", ["\u2028", "\x0c", "\x1c", "\x85"])
def test_a_line_ends_at_a_newline_only(tmp_path, separator):
    """A JSON string may hold the characters str.splitlines breaks at; the problem stays one
    line, and its line numbers count newlines."""
    problem = valid_problem() | {"dataset": f"math{separator}500"}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(problem, ensure_ascii=False) + "\n"
                    + json.dumps(broken(lambda o: o.update(prompt_tokens=0))) + "\n")
    with pytest.raises(TraceError, match=r"t\.jsonl:2: field 'prompt_tokens'"):
        load_traces(path)
    path.write_text(json.dumps(problem, ensure_ascii=False) + "\n")
    assert load_traces(path)[0].dataset == f"math{separator}500"


def test_a_profile_row_ends_at_a_newline_only(tmp_path):
    path = tmp_path / "profile.csv"
    path.write_text(HEADER + "\n" + profile_row(draft_calls="1\x1c") + "\n")
    with pytest.raises(ProfileError, match=r"profile\.csv:2: column 'draft_calls' must be a "
                                           r"number, not '1\\x1c'"):
        read_profile(path)


@pytest.mark.parametrize("opt, message", [
    ("-O3", "cxx_opt must be one of -O0, -O1, -O2, -Os, not '-O3'"),
    ("O1", "cxx_opt must be one of -O0, -O1, -O2, -Os, not 'O1'"),
])
def test_a_simulation_build_takes_only_known_optimizations(tmp_path, opt, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        run_cocotb("kvmu", "heteroreason.sim.verify.tb.kvmu_tb", cxx_opt=opt,
                   build_root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_each_optimization_builds_apart():
    params = {"capacity": 64}
    default = build_dir_for("kvmu", params, "verilator", waves=False)
    assert default.name == "kvmu-capacity64"
    assert build_dir_for("kvmu", params, "verilator", waves=False, cxx_opt="-O0").name == \
        "kvmu-capacity64-O0"
    assert build_dir_for("kvmu", params, "icarus", waves=False, cxx_opt="-O0").name == \
        "kvmu-capacity64"
