"""The project's structure: imports run one way, from the floors above to the floors below, and
no room outgrows what a newcomer can read (the README's layout table states both)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"rtl": "heteroreason.rtl", "sim": "heteroreason.sim", "model": "heteroreason.model",
            "heteroreason": "heteroreason"}
# lowest first; a module belongs to the longest prefix listed. The workload and the BRSD
# controller (what the hardware runs) sit beside the specification: they import neither the RTL
# nor anything that measures or prices it
FLOORS = (
    ("foundation", ("heteroreason.model.files", "heteroreason.model.checks")),
    ("specification", ("heteroreason.model.spec", "heteroreason.model.workload",
                       "heteroreason.model.controller")),
    ("RTL", ("heteroreason.rtl",)),
    ("flow, verification, measurement", ("heteroreason.sim",)),
    ("calibrated timing", ("heteroreason.model.timing",)),
    ("system, fleet, experiments", ("heteroreason.model.system", "heteroreason.model.fleet",
                                    "heteroreason.model.experiments",
                                    "heteroreason.model.executor", "heteroreason.model")),
    ("command line and Python API", ("heteroreason",)),
)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
# a longer function says why in its docstring, on a line of its own beginning with this
LONG_REASON = "Long because"


def _floor(module: str) -> int:
    best, floor = -1, None
    for k, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, floor = len(prefix), k
    assert floor is not None, f"{module} is on no floor: add it to FLOORS"
    return floor


def _modules():
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join([package, *parts]), path


@functools.cache
def _known() -> frozenset[str]:
    return frozenset(name for name, _ in _modules())


def _imports(path: Path):
    """``(line, module)`` of every import; ``from package import module`` names the module."""
    known = _known()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                yield node.lineno, name if name in known else node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def test_imports_never_run_from_a_lower_floor_to_a_higher_one():
    upward = []
    for module, path in _modules():
        mine = _floor(module)
        for line, name in _imports(path):
            if name.startswith("heteroreason.") and _floor(name) > mine:
                upward.append(f"{path.relative_to(ROOT)}:{line} ({FLOORS[mine][0]}) imports "
                              f"{name} ({FLOORS[_floor(name)][0]})")
    assert not upward, "\n".join(upward)


def test_the_floor_check_sees_an_upward_import():
    """The check is not vacuous: the RTL importing the calibrated timing is upward."""
    assert _floor("heteroreason.rtl.kvmu") < _floor("heteroreason.model.timing.fpga.hbm")
    assert _floor("heteroreason.model.spec.protocol") < _floor("heteroreason.rtl.kvmu")
    assert _floor("heteroreason.sim.flow.export") < _floor("heteroreason.model.timing.gpu")
    assert _floor("heteroreason.model.timing.gpu") < _floor("heteroreason.model.fleet.engine")


def _sources():
    for folder in ("rtl", "sim", "model", "scripts", "heteroreason"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_module_is_over_the_line_limit():
    over = [f"{p.relative_to(ROOT)}: {n} lines" for p in _sources()
            if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES]
    assert not over, "\n".join(over)


def test_a_long_function_says_why():
    unexplained = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.end_lineno - node.lineno + 1 <= MAX_FUNCTION_LINES:
                continue
            doc = ast.get_docstring(node) or ""
            if not any(line.strip().startswith(LONG_REASON) for line in doc.splitlines()):
                unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                                   f"({node.end_lineno - node.lineno + 1} lines)")
    assert not unexplained, "\n".join(unexplained)
