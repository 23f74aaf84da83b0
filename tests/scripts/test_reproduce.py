"""The reproduction program and the scheduler benchmark, run as a user would."""

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(script, *args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def test_reproduce_on_bundled_traces(tmp_path):
    proc = run("reproduce.py", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((tmp_path / "reproduction.csv").read_text().splitlines()))
    assert len(rows) == 2 * 4 * 6  # configs x datasets x (3 modes with, 3 without backtracking)
    for name in ("ablation.png", "breakdown.png", "gantt.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert (tmp_path / "gantt.trace.json").stat().st_size > 1000
    by_key = {(r["config"], r["dataset"], r["bt"], r["mode"]): r for r in rows}
    for dataset in ("math500", "gsm8k", "gaokao2023en", "olympiadbench"):
        t2 = float(by_key[("config1", dataset, "yes", "t2")]["speedup"])
        assert 1.1 < t2 < 1.6, (dataset, t2)  # the paper: 1.25-1.33x for Config1
        hetero = by_key[("config1", dataset, "yes", "heteroreason")]
        base = by_key[("config1", dataset, "yes", "baseline")]
        assert float(hetero["J/token"]) < float(base["J/token"])
    for r in rows:  # each speedup against its reference mode on the same traces
        assert r["vs"] == ("baseline" if r["bt"] == "yes" else "rsd"), r
        ref = by_key[(r["config"], r["dataset"], r["bt"], r["vs"])]
        ratio = float(ref["latency s"]) / float(r["latency s"])
        assert abs(float(r["speedup"]) / ratio - 1) < 0.01, (r, ratio)
    sources = list(csv.DictReader((tmp_path / "sources.csv").read_text().splitlines()))
    roles = {"draft (GPU)", "draft (FPGA)", "PRM", "target", "link", "power: draft GPU",
             "power: PRM", "power: target", "power: FPGA", "system power"}
    assert {(s["config"], s["role"]) for s in sources} == \
        {(c, role) for c in ("config1", "config2") for role in roles}
    assert all(s["source"] and s["source"] != "(none recorded)" for s in sources), sources
    assert "the inputs of each configuration and their sources" in proc.stdout


def test_reproduce_on_artifact_samples(tmp_path, artifact):
    folder = artifact / "Hardware" / "inputs" / "Config1"
    proc = run("reproduce.py", "--traces", folder / "with_bt", "--no-bt-traces",
               folder / "no_bt", "--prompt-tokens", "128", "--configs", "config1", "--no-plots",
               "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((tmp_path / "reproduction.csv").read_text().splitlines()))
    assert len(rows) == 4 * 6
    assert "480 problem replays" in proc.stdout


def test_reproduce_rejects_bad_input(tmp_path, fixtures):
    proc = run("reproduce.py", "--traces", tmp_path / "absent.jsonl", "--out", tmp_path)
    assert proc.returncode == 2 and "cannot be read" in proc.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    proc = run("reproduce.py", "--traces", empty, "--out", tmp_path)
    assert proc.returncode == 2 and "holds no problems" in proc.stderr
    bundled = ROOT / "model" / "workload" / "data" / "traces" / "math500.jsonl"
    proc = run("reproduce.py", "--traces", bundled, "--no-bt-traces", bundled, "--configs",
               "config1", "--no-plots", "--out", tmp_path)
    assert proc.returncode == 2 and "replays traces without backtracking" in proc.stderr
    assert not (tmp_path / "reproduction.csv").exists(), "no table from a partial replay"
    proc = run("reproduce.py", "--configs", "config7")
    assert proc.returncode == 2 and "invalid choice: 'config7'" in proc.stderr


def test_bench_scheduler_prints_rates():
    proc = run("bench_scheduler.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("problems/s") == 5 and "11516 problems" in proc.stdout


def test_reproduce_on_captured_traces(tmp_path):
    traces = tmp_path / "brsd.jsonl"
    proc = run("run_brsd.py", "--count", "2", "--max-steps", "5", "--out", traces)
    assert proc.returncode == 0, proc.stderr
    proc = run("reproduce.py", "--traces", traces, "--configs", "config1", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ablation.png").exists() and (tmp_path / "gantt.png").exists()
