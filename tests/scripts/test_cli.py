"""The command-line programs for traces and device models, run as a user would."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(script, *args, cwd=ROOT):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


def test_generate_stats_validate(tmp_path):
    proc = run("traces.py", "generate", "--dataset", "all", "--problems", "50", "--seed", "4",
               "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    files = sorted(tmp_path.glob("*.jsonl"))
    assert [f.stem for f in files] == ["gaokao2023en", "gsm8k", "math500", "olympiadbench"]
    proc = run("traces.py", "stats", *files)
    assert proc.returncode == 0, proc.stderr
    assert "steps/problem" in proc.stdout and "profile math500" in proc.stdout
    proc = run("traces.py", "validate", *files)
    assert proc.returncode == 0 and proc.stdout.count("events: valid") == 4


def test_import_fixtures(tmp_path, fixtures):
    out = tmp_path / "a"
    proc = run("traces.py", "import", "--format", "artifact", fixtures / "artifact", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "imported 2 problems" in proc.stdout
    out2 = tmp_path / "b"
    proc = run("traces.py", "import", "--format", "token-log", fixtures / "token_log.jsonl",
               "--dataset", "toy", "--prompt-tokens", "20", "--skip-invalid", "--out", out2)
    assert proc.returncode == 0, proc.stderr
    assert f"imported 2 problems into {out2 / 'toy.jsonl'}" in proc.stdout
    assert "skipped:" in proc.stderr
    assert sorted(p.name for p in out2.iterdir()) == ["toy.jsonl"]  # no partial file left


def test_import_artifact_samples(tmp_path, artifact):
    out = tmp_path / "with_bt"
    proc = run("traces.py", "import", "--format", "artifact",
               artifact / "Hardware" / "inputs" / "Config1" / "with_bt", "--out", out)
    assert proc.returncode == 0, proc.stderr
    counts = [int(line.split()[1]) for line in proc.stdout.splitlines()
              if line.startswith("imported")]
    assert sum(counts) == 120 and len(counts) == 4  # a file per dataset
    proc = run("traces.py", "stats", *sorted(out.glob("*.jsonl")))
    assert proc.stdout.count("\n") >= 9  # header + 4 datasets + 4 profiles


@pytest.mark.parametrize("args, message", [
    (["validate", "absent.jsonl"], "cannot be read"),
    (["import", "--format", "token-log", "tests/fixtures/token_log.jsonl", "--out", "x.jsonl"],
     "token logs carry neither; give both"),
    (["import", "--format", "artifact", "nowhere/", "--out", "x.jsonl"], "does not exist"),
    (["generate", "--dataset", "all", "--seed", "-2", "--out", "x"],
     "--seed must be a non-negative integer"),
    (["generate", "--dataset", "aime", "--seed", "1", "--out", "x"], "invalid choice: 'aime'"),
])
def test_trace_cli_errors(args, message):
    proc = run("traces.py", *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_validate_reports_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"dataset": "d", "problem_id": 1, "prompt_tokens": -4, "steps": []}\n')
    proc = run("traces.py", "validate", bad)
    assert proc.returncode == 2
    assert f"{bad}:1: field 'prompt_tokens': must be at least 1 (got -4)" in proc.stderr


def test_device_models_cli(tmp_path):
    proc = run("device_models.py", "presets")
    assert proc.returncode == 0 and "fpga/artifact-u280" in proc.stdout
    proc = run("device_models.py", "roofline", "--context", "1024")
    assert proc.returncode == 0 and "measured/roofline" in proc.stdout
    bad = tmp_path / "p.csv"
    bad.write_text("draft_latency_ms\n1\n")
    proc = run("device_models.py", "fit", bad)
    assert proc.returncode == 2 and "missing column(s)" in proc.stderr


def test_device_models_fit_artifact(artifact):
    folder = artifact / "AE_hardware" / "inputs" / "step_profile_csv" / "config2"
    proc = run("device_models.py", "fit", *sorted(folder.glob("*.csv")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("target") >= 2


def test_numerics_report():
    proc = run("numerics_report.py", "--positions", "260")
    assert proc.returncode == 0, proc.stderr
    assert "494.0 M parameters, 357.9 M without embeddings, KV 12288 B/token" in proc.stdout
    assert proc.stdout.count("test-small") == 3
    proc = run("numerics_report.py", "--positions", "0")
    assert proc.returncode == 2 and "--positions must be an integer in [1, 512]" in proc.stderr


def test_run_brsd(tmp_path):
    out = tmp_path / "brsd"
    proc = run("run_brsd.py", "--count", "2", "--max-steps", "6", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "heteroreason" in proc.stdout and "wrote 2 traces" in proc.stdout
    proc = run("traces.py", "validate", out / "traces.jsonl")
    assert proc.returncode == 0
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "tokens": [3, 4, 5]}\n{"id": "b", "tokens": [3, 9999]}\n')
    proc = run("run_brsd.py", "--prompts", prompts, "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert f"{prompts}:2: field 'tokens': must be a non-empty list of ids in [0, 256)" in \
        proc.stderr


@pytest.mark.slow
def test_bench_decoder_reports_utilization():
    proc = run("bench_decoder.py", "--configs", "tiny", "--contexts", "3", "40")
    assert proc.returncode == 0, proc.stderr
    assert "utilization %" in proc.stdout and "test-tiny" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] == ["tiny"]]
    assert [int(r[4]) for r in rows] == [3, 40]
    cycles, ideal = int(rows[1][5]), int(rows[1][6])
    assert ideal < cycles < 2 * ideal
    assert float(rows[1][7]) == float(rows[1][8])  # no stalls: the memory's rate is a beat
    # a memory that offers half a beat a cycle: the utilization of its rate is twice the
    # utilization of a beat a cycle
    proc = run("bench_decoder.py", "--configs", "tiny", "--contexts", "40", "--stall", "0.5")
    assert proc.returncode == 0, proc.stderr
    row = next(line.split() for line in proc.stdout.splitlines()
               if line.split()[:1] == ["tiny"])
    utilization, of_rate = float(row[7]), float(row[8])
    assert of_rate == pytest.approx(2 * utilization, abs=0.11) and of_rate <= 100.0
    assert int(row[5]) > cycles
    proc = run("bench_decoder.py", "--configs", "tiny", "--contexts", "9999")
    assert proc.returncode == 2 and "--contexts must be in [0, 512) for config tiny" in \
        proc.stderr
    proc = run("bench_decoder.py", "--latency", "-1")
    assert proc.returncode == 2 and "--latency must be a non-negative integer" in proc.stderr
    # the weights on a board's memory plan: the tiny core's 8-byte stream fits one U280 port,
    # which carries a beat a cycle: the memory's rate is a beat; the parameters time-shared on it
    proc = run("bench_decoder.py", "--configs", "tiny", "--contexts", "40", "--board", "u280-300")
    assert proc.returncode == 0, proc.stderr
    assert "tiny on u280-300's memory plan: params: 9 B/beat time-shared on the weights' ports" \
        in proc.stderr and "weights: 8 B/beat over 1 x 256-bit port" in proc.stderr
    row = next(line.split() for line in proc.stdout.splitlines()
               if line.split()[:1] == ["tiny"])
    assert float(row[7]) == float(row[8])
    proc = run("bench_decoder.py", "--board", "u280-300", "--stall", "0.2")
    assert proc.returncode == 2 and "--stall and --board exclude each other" in proc.stderr
    proc = run("bench_decoder.py", "--board", "u280-300", "--port-fifo", "0")
    assert proc.returncode == 2 and "--port-fifo must be a positive integer, not 0" in \
        proc.stderr
    proc = run("bench_decoder.py", "--gaps", "paced")
    assert proc.returncode == 2 and "--gaps paced needs --board" in proc.stderr
    # the tiny core's port runs at a beat a cycle: no time left to refresh
    proc = run("bench_decoder.py", "--configs", "tiny", "--contexts", "40", "--board",
               "u280-300", "--gaps", "refresh")
    assert proc.returncode == 2 and "--gaps refresh on u280-300 with config tiny: a port at 1 " \
        "beats a cycle cannot also refresh 105 of every 1170 cycles" in proc.stderr


def test_cosim_brsd_rejects_bad_arguments(tmp_path):
    proc = run("cosim_brsd.py", "--out", tmp_path / "t.jsonl", "--delimiters", "16", "34", "40")
    assert proc.returncode == 2 and "--delimiters takes one or two ids" in proc.stderr
    proc = run("cosim_brsd.py", "--out", tmp_path / "t", "--count", "0")
    assert proc.returncode == 2 and "--count must be an integer in [1, 64]" in proc.stderr
    proc = run("cosim_brsd.py", "--out", tmp_path / "t", "--count", "100000000")
    assert proc.returncode == 2 and "--count must be an integer in [1, 64]" in proc.stderr
    proc = run("cosim_brsd.py", "--out", tmp_path / "t", "--contexts", "17")
    assert proc.returncode == 2 and "--contexts must be an integer in [1, 16]" in proc.stderr
    proc = run("cosim_brsd.py", "--out", tmp_path / "t", "--contexts", "2", "--per-pass", "4")
    assert proc.returncode == 2 and "--per-pass must be 2, 4 or 8 and at most --contexts (2), " \
        "not 4" in proc.stderr
    proc = run("cosim_brsd.py", "--out", tmp_path / "t", "--per-pass", "2")
    assert proc.returncode == 2 and "--per-pass needs --contexts of 2 or more" in proc.stderr
    # a problem that could outgrow the engine's KV is refused before the engine is built
    proc = run("cosim_brsd.py", "--out", tmp_path / "t", "--max-steps", "100",
               "--max-step-tokens", "100")
    assert proc.returncode == 2 and "(100 x 100 = 10000) must fit the engine's KV capacity " \
        "of 512 tokens" in proc.stderr
    assert not (tmp_path / "t").exists()


def test_predict_fpga_prints_the_projection(tmp_path):
    out = tmp_path / "p"
    proc = run("predict_fpga.py", "--contexts", "0", "2048", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "speed-up vs paper" in proc.stdout and "jetson-orin-nano" in proc.stdout
    assert (out / "predict.png").stat().st_size > 10_000
    speeds = json.loads((out / "speeds.json").read_text())  # the printed table, as JSON
    assert {(r["device"], r["context"]) for r in speeds} >= {("u280-300", 0), ("v80", 2048)}
    assert (out / "designs.csv").read_text().startswith("board,MHz,")
    assert json.loads((out / "run.json").read_text())["command"][:2] == ["heteroreason",
                                                                         "predict"]
    # the shadow ingest of a 100-token step: cheaper than 100 decodes (no LM head), and each
    # ingested token cheaper than the decode token the projection prints at that context
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("shadow synchronisation"))
    ingest = {(r[0], int(r[1])): r for r in (line.split() for line in lines[at + 2:at + 8])}
    decode = {(r[0], int(r[1])): float(r[2]) for r in (line.split() for line in lines)
              if len(r) == 8 and r[0] in ("u280-300", "v80") and r[1] in ("0", "2048")}
    assert len(decode) == 4
    for key, ms in decode.items():
        row = ingest[key]
        assert int(row[2]) == 100 and float(row[4]) < ms < float(row[5]) / 100 * 1.01
        assert float(row[6]) == pytest.approx(float(row[5]) / float(row[3]), abs=0.01)
        # the modelled batched ingest (4 tokens a pass): cheaper than token by token, but
        # not cheaper than a quarter of it
        assert float(row[3]) / 4 < float(row[7]) < float(row[3])
        assert float(row[8]) == pytest.approx(float(row[5]) / float(row[7]), rel=0.005)
    # the design each board would build with the batch, and its resources against the board's
    batched = [line for line in lines if line.startswith("    u280-300: ")]
    assert len(batched) == 1 and "KV rows a cycle: LUT" in batched[0]
    # each design at the other clocks: at its own, the tok/s the speeds table prints; a slower
    # clock never faster; every cell under the memory ceiling
    clocks = json.loads((out / "clocks.json").read_text())
    own = {(r["device"], r["context"]): r["tok/s"] for r in speeds}
    assert {(r["design"], r["context"]) for r in clocks} == \
        {k for k in own if k[0] != "jetson-orin-nano"}
    for r in clocks:
        tok_s = [int(r[f"{mhz} MHz tok/s (% of ceiling)"].split()[0]) for mhz in (200, 250, 300)]
        mhz = {"u280-200": 200, "u280-300": 300, "v80": 300}[r["design"]]
        assert str(tok_s[(200, 250, 300).index(mhz)]) == own[(r["design"], r["context"])]
        assert tok_s == sorted(tok_s) and tok_s[-1] < int(r["ceiling tok/s"])
    proc = run("predict_fpga.py", "--contexts", "99999", "--out", out)
    assert proc.returncode == 2 and "--contexts must be in [0, 32768)" in proc.stderr
    proc = run("predict_fpga.py", "--clocks", "250", "0", "--out", out)
    assert proc.returncode == 2 and "--clocks must be numbers in [1, 2000] (MHz), not 0" in \
        proc.stderr


@pytest.mark.parametrize("script, args, message", [
    ("bench_scheduler.py", ["--seed", "-1"], "--seed must be a non-negative integer, not -1"),
    ("predict_fpga.py", ["--ingest-step", "0"], "--ingest-step must be a positive integer, not 0"),
    ("predict_fpga.py", ["--ingest-batch", "0"],
     "--ingest-batch must be a positive integer, not 0"),
    ("predict_fpga.py", ["--out", "/dev/null/p"], "--out: "),
    ("predict_fpga.py", ["--passes", "9"],
     "--passes must be integers in [1, 8] (contexts a pass), not 9"),
    ("predict_fpga.py", ["--ingest-step", "2000000000"],
     "--ingest-step must be at most the model's context, 32768, not 2000000000"),
])
def test_bad_arguments_exit_2_before_any_work(tmp_path, script, args, message):
    proc = run(script, *(a.format(tmp=tmp_path) for a in args))
    assert proc.returncode == 2
    assert f"error: {message.format(tmp=tmp_path)}" in proc.stderr.strip().splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


def test_a_chain_that_ends_empty_reproduces(tmp_path):
    """A valid trace whose final chain is empty: the reproduction runs and reports it."""
    trace = ('{"dataset": "toy", "problem_id": "0", "prompt_tokens": 100, "steps": ['
             '{"outcome": "accept", "draft_tokens": 10}, {"outcome": "backtrack", '
             '"draft_tokens": 6, "target_tokens": 4, "backtrack_steps": 1, '
             '"regenerated_tokens": 0}]}\n')
    (tmp_path / "toy.jsonl").write_text(trace)
    assert run("traces.py", "validate", tmp_path / "toy.jsonl").returncode == 0
    proc = run("reproduce.py", "--traces", tmp_path / "toy.jsonl", "--configs", "config1",
               "--no-plots", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "inf" in (tmp_path / "out" / "reproduction.csv").read_text()


@pytest.mark.parametrize("script, args", [
    ("traces.py", ["generate", "--dataset", "all", "--problems", "2", "--seed", "1"]),
    ("traces.py", ["generate", "--dataset", "gsm8k", "--problems", "2", "--seed", "1"]),
    ("reproduce.py", ["--no-plots"]),
    ("export_verilog.py", ["--top", "kvmu"]),
    ("run_brsd.py", []),
    ("predict_fpga.py", []),
    ("break_even.py", []),
    ("cosim_brsd.py", []),
    ("calibrate.py", ["--quick"]),
])
def test_output_paths_are_checked_before_any_work(tmp_path, script, args):
    """--out is a directory for every program, checked before any work."""
    taken = tmp_path / "taken"
    taken.write_text("a file where a folder goes")
    message = f"--out: {taken} exists and is not a folder"
    proc = run(script, *args, "--out", taken)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().endswith(f"error: {message}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_generation_is_bounded(tmp_path):
    proc = run("traces.py", "generate", "--dataset", "gsm8k", "--problems", "1000000000",
               "--seed", "1", "--out", tmp_path / "t.jsonl")
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(
        "error: --problems must be an integer in [1, 1,000,000], "
        "not 1000000000")
    assert list(tmp_path.iterdir()) == []


def test_traces_without_backtracking_need_their_dataset(tmp_path):
    run("traces.py", "generate", "--dataset", "gsm8k", "--problems", "3", "--seed", "1",
        "--out", tmp_path)
    run("traces.py", "generate", "--dataset", "math500", "--problems", "3", "--seed", "1",
        "--out", tmp_path / "nobt")
    proc = run("reproduce.py", "--traces", tmp_path / "gsm8k.jsonl", "--no-bt-traces",
               tmp_path / "nobt" / "math500.jsonl", "--no-plots", "--out", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "heteroreason reproduce: error: traces without backtracking for math500 have no traces "
        "with backtracking to be compared with (those are for gsm8k)")


def test_generation_beyond_the_context_exits_2_and_writes_nothing(tmp_path):
    proc = run("traces.py", "generate", "--dataset", "all", "--max-context", "20",
               "--seed", "1", "--out", tmp_path / "sets")
    assert proc.returncode == 2
    assert "traces: error: dataset math500: problem 0 (math500): its prompt and first step " \
           "need" in proc.stderr
    assert "beyond max_context_tokens 20" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("args, message", [
    (["--problems", "0"], "--problems must be an integer in [1, 1,000,000], not 0"),
    (["--seed", "-1"], "--seed must be a non-negative integer, not -1"),
    (["--dataset", "nope"], "argument --dataset: invalid choice: 'nope'"),
])
def test_bench_memory_bad_options(args, message):
    proc = run("bench_memory.py", *args)
    assert proc.returncode == 2
    assert message in proc.stderr
