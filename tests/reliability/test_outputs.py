"""Outputs whole or absent: a run interrupted (Ctrl-C, SIGTERM) or failing leaves its output
directory as it was and no staging folder or lock behind; a second run writing the same
directory at the same time is refused; a lock left by a run that is gone is taken over."""

import os
import signal
import subprocess
import sys

import pytest
from reliability_cases import sigint_as_at_a_terminal

from heteroreason.commands.common import OutputBusy, staged_output


def _start(out, *args):
    return subprocess.Popen([sys.executable, "-m", "heteroreason", "reproduce", "--out",
                             str(out), "--workers", "1", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_at_a_terminal)


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("sent, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_run_leaves_the_previous_result(tmp_path, sent, status):
    out = tmp_path / "out"
    out.mkdir()
    (out / "reproduction.csv").write_text("a previous run's table\n")
    with _start(out) as proc:
        for line in proc.stderr:  # the run has its lock and staging folder once it says this
            if line.startswith("replaying"):
                break
        proc.send_signal(sent)
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == status, err
    assert f"heteroreason reproduce: {'terminated' if status == 143 else 'interrupted'}" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["reproduction.csv"]
    assert (out / "reproduction.csv").read_text() == "a previous run's table\n"
    assert _leftovers(tmp_path) == []


def test_a_second_writer_is_refused(tmp_path):
    out = tmp_path / "out"
    (tmp_path / ".out.lock").write_text(f"{os.getpid()}\n")  # a live process holds it
    proc = subprocess.run([sys.executable, "-m", "heteroreason", "reproduce", "--out", str(out),
                           "--no-plots"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"--out: {out} is being written by another run (process {os.getpid()}" in \
        proc.stderr
    assert not out.exists()


def test_a_lock_of_a_run_that_is_gone_is_taken_over(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / ".out.lock").write_text(f"{gone}\n")
    with staged_output(tmp_path / "out") as stage:
        (stage / "a.txt").write_text("whole")
    assert (tmp_path / "out" / "a.txt").read_text() == "whole"
    assert _leftovers(tmp_path) == []


def test_an_error_leaves_nothing_and_releases_the_lock(tmp_path):
    with pytest.raises(RuntimeError), staged_output(tmp_path / "out") as stage:
        (stage / "half.csv").write_text("half")
        raise RuntimeError("the run failed")
    assert list(tmp_path.iterdir()) == []
    with staged_output(tmp_path / "out") as stage:  # and the next run may write
        (stage / "sub").mkdir()
        (stage / "sub" / "b.txt").write_text("b")
    assert (tmp_path / "out" / "sub" / "b.txt").read_text() == "b"
    with pytest.raises(OutputBusy), staged_output(tmp_path / "out"), \
            staged_output(tmp_path / "out"):
        pass


def test_json_nested_beyond_the_recursion_limit_is_a_located_error(tmp_path):
    from heteroreason.model.files import InputError, loads_json

    with pytest.raises(InputError, match=r"^deep\.json: is not valid JSON here: nested deeper "
                                         r"than \d+ levels$"):
        loads_json("[" * 100_000 + "]" * 100_000, "deep.json")


def test_an_arrival_past_the_simulators_resolution_is_refused(tmp_path):
    from heteroreason.model.files import InputError
    from heteroreason.model.fleet.workload import load_arrival_trace

    path = tmp_path / "arrivals.txt"
    path.write_text("0\n1e300\n")
    with pytest.raises(InputError, match=r"arrivals\.txt:2: arrival time 1e\+300 must be a "
                                         r"number in \[0, 1e\+09\]"):
        load_arrival_trace(path)


@pytest.mark.parametrize("slo_ms", [-1.0, float("nan"), float("inf"), 0.0])
def test_a_fleet_slo_must_be_finite_and_positive(slo_ms):
    from heteroreason.model.fleet.metrics import fleet_metrics

    with pytest.raises(ValueError, match=r"^slo_ms must be a finite positive number"):
        fleet_metrics(None, slo_ms=slo_ms)
