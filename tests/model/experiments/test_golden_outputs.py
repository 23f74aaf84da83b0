"""Golden outputs: the reproduction's tables and timeline, byte for byte as the code produced them
before the restructuring into packages (commit 423a7a3); the calibration points and the
``rtl-u280-300`` table were regenerated when the datapath was pipelined (commit 30a6a6b) and when
the attention unit and the core's glue were, and when the prefetch buffers gained output
registers and the core's token start a register (the +2 cycles a token move no table figure),
and when the scratchpad readers gained a landing register and the sampler its interleaved
maxima (+11 to +22 cycles a token: the last digit of five ``rtl-u280-300`` figures), and when
the Config2 rows without backtracking gained the paper's figures (``paper s``, ``diff %``),
and when the rows without backtracking took their speedup against RSD on their own traces (a
``vs`` column; the JSON's ``speedup`` and ``speedup_vs``) and an operator's change moved a cycle
after its last handshake (+20 cycles a token on the U280 design: the last digit of ten
``rtl-u280-300`` figures), and when the GPU models of the draft, Config2's PRM and Config2's
target were fitted on the measured step profiles (every figure), and when the MVU's adder
tree and the attention's maximum gained a register (+1 cycle a row's result, +1 a score) and
the generator's profiles became the full sets' statistics in step semantics (every bundled
figure), and when the RMSNorm emitted several results a cycle (the U280 design's 16 gains a
parameter beat: every ``rtl-u280-300`` figure; the calibration gained a gains column and
points at 2 and 8 gains), and when the core took several rows a weight beat and the HBM plan
let a weight slice span several port beats (the U280 design's four rows of 448: every
``rtl-u280-300`` figure; the calibration gained a rows-a-beat column, points at 2 and 4 rows
and the full-size held-out layer at the new design, and its overheads were refitted), and when
the attention took several KV rows a cycle and the boards' designs time-shared their HBM ports
(every ``rtl-*`` figure; the calibration gained a KV-rows column, points at 2, 4 and 8 rows and
the full-size layer at contexts 2,048 and 4,095, and its overheads were refitted), and when
the attention computed a job's scores while the job before it finished (every ``rtl-*``
figure's last digit at most; the calibration's points and overheads refitted), and when the
MVU's rows and the attention's scores were packed two a DSP slice and the design search placed
each board's design on its SLRs (issue 42: the U280 design became 448 lanes x 4 rows; every
``rtl-*`` figure; the calibration's points and overheads refitted), and when the
attention's streams crossed registered on both sides, held back by credits (issue 42: a few
cycles a job; the last digit of some ``rtl-*`` figures; the calibration's points and
overheads refitted), and when the shared crossing of the key and value rows landed each way's
payload in a register (+1 cycle a job's key rows: digits past the fifth of the ``rtl-*``
figures; the calibration's points and overheads refitted);
the bundled tables when generated problems began to
end at the PRM's context (OlympiadBench and the Gaokao and OlympiadBench traces without
backtracking changed), and when the reproduction ran HeteroReason with three FPGA models (the
artifact's line, ``rtl-u280-300``, ``rtl-v80``; the Gantt chart shows ``rtl-u280-300``), its
rows gained the FPGA model, the GPU draft, the speed-up over ``t2``, accuracy and the paper's
Table III, and the wasted energy came to count the accepted steps' unused prefetches (every
``wasted energy %``; nothing else moved). A change of any figure fails here; an intended one
regenerates the files in ``tests/fixtures/golden/`` and says why in its commit."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from heteroreason.model.timing.fpga.calibration import load_calibration

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "fixtures" / "golden"
# the same program on the artifact's Config1 sample traces (../shared): digests only, the data
# is not the project's to copy
ARTIFACT_CSV_SHA256 = "502a97a931fd891fce271e16902287ee8d021b062ef366f6f26e4df24298e799"
ARTIFACT_JSON_SHA256 = "c7848cc373ed7d751b3345f79ebe9b818744b2672cd528449b1f487b256ee102"


def reproduce(out: Path, *args) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce.py"), "--out",
                           str(out), *map(str, args)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bundled_reproduction_is_unchanged(tmp_path):
    reproduce(tmp_path)
    for name in ("reproduction.csv", "reproduction.json"):
        assert (tmp_path / name).read_text() == (GOLDEN / f"bundled.{name}").read_text(), name
    assert sha256(tmp_path / "gantt.trace.json") == \
        (GOLDEN / "bundled.gantt.trace.json.sha256").read_text().split()[0]


def test_calibrated_fpga_reproduction_is_unchanged(tmp_path):
    reproduce(tmp_path, "--fpgas", "rtl-u280-300", "--no-plots")
    assert (tmp_path / "reproduction.csv").read_text() == \
        (GOLDEN / "rtl-u280-300.reproduction.csv").read_text()


def test_artifact_reproduction_is_unchanged(tmp_path, artifact):
    folder = artifact / "Hardware" / "inputs" / "Config1"
    reproduce(tmp_path, "--traces", folder / "with_bt", "--no-bt-traces", folder / "no_bt",
              "--prompt-tokens", "128", "--configs", "config1", "--no-plots")
    assert sha256(tmp_path / "reproduction.csv") == ARTIFACT_CSV_SHA256
    assert sha256(tmp_path / "reproduction.json") == ARTIFACT_JSON_SHA256


@pytest.mark.parametrize("name, fpgas", [("bundled.reproduction.csv", 3),
                                         ("rtl-u280-300.reproduction.csv", 1)])
def test_golden_files_hold_every_row(name, fpgas):
    rows = (GOLDEN / name).read_text().splitlines()
    # header, configs x datasets x (two GPU-only modes + each FPGA model, with and without
    # backtracking)
    assert len(rows) == 1 + 2 * 4 * 2 * (2 + fpgas)


def test_calibration_report_is_unchanged():
    """The committed calibration's points (the RTL cycles the timing model was fitted on and
    held out against) and its held-out errors, as before the restructuring."""
    calibration = load_calibration()
    rows = ["set,preset,lanes,stream_bytes,heads_parallel,vector_width,param_width,"
            "rows_per_beat,kv_rows,weight_buffer,memory_latency_cycles,external_kv,position,"
            "rtl_cycles,model_error"]
    for part, points in (("train", calibration.train), ("held_out", calibration.held_out)):
        for p in points:
            q = p.params
            error = round(p.error(calibration.overheads), 6) if part == "held_out" else ""
            rows.append(",".join(map(str, [
                part, p.preset, q.lanes, q.stream_bytes, q.heads_parallel, q.vector_width,
                q.param_width, q.rows_per_beat, q.kv_rows, q.weight_buffer,
                p.memory_latency_cycles,
                int(q.external_kv),
                p.position, p.cycles, error])))
    assert "\n".join(rows) + "\n" == (GOLDEN / "calibration.csv").read_text()
