"""`heteroreason fit`, run as a user would: the committed evidence per board, bad options and
files refused with exit status 2, and (slow) the small case synthesized and placed."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def fit(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "fit_report.py"),
                           *map(str, args)], capture_output=True, text=True, cwd=ROOT)


EVIDENCE = ROOT / "model/timing/fpga/data/fit_evidence.json"


def committed(name):
    return any(d["name"] == name for d in json.loads(EVIDENCE.read_text())["designs"])


def test_the_boards_designs_from_the_committed_evidence():
    proc = fit()
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    if committed("u280-300"):
        assert out.startswith(("u280-300: fits", "u280-300: DOES NOT FIT"))
        assert "decoder_core of qwen2.5-0.5b on u280-300: 448 lanes x 4 rows" in out
        assert "SLR0-SLR1:" in out and "the analytic estimate" in out
    else:
        assert out.startswith("u280-300: not synthesized: ")
        assert "run heteroreason fit --synthesize --board u280-300 --write-evidence" in out
    if committed("v80"):
        assert out.split("\nv80: ")[1].startswith(("fits", "DOES NOT FIT"))
    else:
        assert "v80: not synthesized: " in out


def test_the_small_case_from_the_committed_evidence():
    proc = fit("--case", "small")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("small: ")
    assert "decoder_core of test-small on u280-300" in proc.stdout
    assert "SLR0-SLR1: 0 bits cross" in proc.stdout


def test_check_fails_on_a_design_that_does_not_fit():
    proc = fit("--check", "--board", "u280-300")
    verdict_fits = proc.stdout.startswith("u280-300: fits")
    assert proc.returncode == (0 if verdict_fits else 1), proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--write-evidence", "x.json"], "--write-evidence needs --synthesize or --carry"),
    (["--carry", "--synthesize"], "--carry reads the evidence's netlists"),
    (["--carry", "--evidence", "/nonexistent/fit.json"], "cannot be read"),
    (["--case", "small", "--board", "v80"], "--case and --board"),
    (["--board", "u250"], "invalid choice: 'u250'"),
    (["--evidence", "/nonexistent/fit.json"], "no fit evidence"),
    (["--synthesize", "--yosys", "/nonexistent/yosys"], "no native Yosys"),
    (["--reread"], "--reread needs --synthesize and --work"),
    (["--synthesize", "--reread", "--work", "/nonexistent/w"], "no record of a synthesis"),
])
def test_bad_options_exit_2(args, message):
    proc = fit(*args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_evidence_without_the_design_asked_for(tmp_path):
    obj = json.loads(EVIDENCE.read_text())
    obj["designs"] = [d for d in obj["designs"] if d["name"] != "v80"]
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(obj))
    proc = fit("--evidence", path, "--board", "v80", "--check")
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"v80: not synthesized: {path} holds no design of that name")


def test_carry_names_what_the_evidence_lacks_before_elaborating(tmp_path):
    obj = json.loads(EVIDENCE.read_text())
    obj["rtl_hash"] = "0" * 64  # other RTL
    for d in obj["designs"]:
        d.pop("source_sha256", None)
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(obj))
    proc = fit("--carry", "--case", "small", "--evidence", path)
    assert proc.returncode == 2, proc.stderr
    assert f"{path}: small: keeps no digest of its RTLIL and is of other RTL" in proc.stderr
    obj["designs"] = [d for d in obj["designs"] if d["name"] != "small"]
    path.write_text(json.dumps(obj))
    proc = fit("--carry", "--case", "small", "--evidence", path)
    assert proc.returncode == 2 and "small: holds no design of that name" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("yosys") is None, reason="no native yosys")
def test_the_small_case_synthesized_and_placed(tmp_path):
    """The case CI synthesizes (the test-small core, about three minutes of Yosys): its
    units add up and it all goes beside the U280's HBM, in SLR0."""
    out = tmp_path / "fit.json"
    proc = fit("--synthesize", "--case", "small", "--work", tmp_path / "work",
               "--write-evidence", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("small: ")
    assert "decoder_core of test-small on u280-300" in proc.stdout
    assert "SLR0-SLR1: 0 bits cross" in proc.stdout  # it all fits beside the HBM
    design = json.loads(out.read_text())["designs"][0]
    for r in ("lut", "ff", "dsp", "bram18k", "uram", "carry"):
        assert sum(u[r] for u in design["units"].values()) == design["total"][r]
    assert {"mvu", "att", "wbuf", "glue"} <= set(design["units"])
    # the same RTL gives the same RTLIL: carried to itself, the digest is the one synthesized
    proc = fit("--carry", "--case", "small", "--evidence", out, "--write-evidence",
               tmp_path / "carried.json")
    assert proc.returncode == 0, proc.stderr
    carried = json.loads((tmp_path / "carried.json").read_text())["designs"][0]
    assert carried["source_sha256"] == design["source_sha256"]


def test_a_stale_calibration_is_refused_before_any_elaboration(tmp_path, stale_calibration,
                                                              capsys):
    """The boards' designs are chosen on the calibrated model: a calibration of other RTL is an
    error naming the file, with exit status 2, not a traceback."""
    from heteroreason.commands import fit as command

    stale = stale_calibration
    code = command.main(["--carry", "--board", "v80", "--write-evidence",
                         str(tmp_path / "fit.json")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"heteroreason fit: error: {stale}: calibrated on RTL 000000000000" in err
    assert not (tmp_path / "fit.json").exists()
