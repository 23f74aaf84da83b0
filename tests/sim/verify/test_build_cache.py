"""The simulation build cache: a build directory stamped with the current build key is run as it
is, anything else is exported and built again, and a Verilator build keeps only its program."""

import pytest

from heteroreason.sim.verify import runner
from heteroreason.sim.verify.runner import BUILD_STAMP, build_key, run_cocotb

KVMU_TB = "heteroreason.sim.verify.tb.kvmu_tb"
PARAMS = {"capacity": 64}


@pytest.fixture
def exports(monkeypatch):
    """The tops exported during the test, in order."""
    calls = []
    real = runner.export_verilog

    def counting(top, out_dir, params, **options):
        calls.append(top)
        return real(top, out_dir, params, **options)

    monkeypatch.setattr(runner, "export_verilog", counting)
    return calls


def _run(build_root):
    return run_cocotb("kvmu", KVMU_TB, params=PARAMS, simulator="verilator", seed=3,
                      testcase="scenario_accept", build_root=build_root)


def test_a_stamped_build_is_neither_exported_nor_built_again(tmp_path, exports):
    first = _run(tmp_path)
    assert (first.tests, first.failed) == (1, 0)
    assert exports == ["kvmu"]
    program = first.build_dir / "kvmu"
    built_at = program.stat().st_mtime_ns
    second = _run(tmp_path)
    assert (second.tests, second.failed) == (1, 0)
    assert exports == ["kvmu"], "the second run exported the top again"
    assert program.stat().st_mtime_ns == built_at


def test_a_verilator_build_keeps_its_program_and_no_intermediates(tmp_path, exports):
    result = _run(tmp_path)
    names = {path.name for path in result.build_dir.iterdir()}
    assert {"kvmu", "kvmu.v", "build.log", BUILD_STAMP} <= names
    left = sorted(name for name in names if name.endswith((".o", ".a", ".gch", ".cpp", ".h",
                                                           ".mk", ".d")))
    assert left == [], f"intermediates left in {result.build_dir}: {left}"


def test_a_stale_stamp_or_a_missing_program_rebuilds(tmp_path, exports):
    result = _run(tmp_path)
    (result.build_dir / BUILD_STAMP).write_text("0" * 64)
    assert _run(tmp_path).failed == 0
    assert exports == ["kvmu", "kvmu"]
    (result.build_dir / "kvmu").unlink()
    assert _run(tmp_path).failed == 0
    assert exports == ["kvmu", "kvmu", "kvmu"]
    assert (result.build_dir / BUILD_STAMP).read_text() == build_key(
        "kvmu", runner.parse_params("kvmu", []) | PARAMS, "verilator",
        runner.SIM_BUILD_ARGS["verilator"], waves=False)


def test_the_build_key_follows_what_a_build_depends_on(tmp_path, monkeypatch):
    base = build_key("kvmu", PARAMS, "verilator", ["-Wno-fatal"], waves=False)
    assert base == build_key("kvmu", dict(PARAMS), "verilator", ["-Wno-fatal"], waves=False)
    others = {
        build_key("kvmu", {"capacity": 128}, "verilator", ["-Wno-fatal"], waves=False),
        build_key("kvmu", PARAMS, "icarus", ["-Wno-fatal"], waves=False),
        build_key("kvmu", PARAMS, "verilator", ["-Wno-fatal", "-CFLAGS", "-O0"], waves=False),
        build_key("kvmu", PARAMS, "verilator", ["-Wno-fatal"], waves=True),
        build_key("input_mux", PARAMS, "verilator", ["-Wno-fatal"], waves=False),
    }
    assert base not in others and len(others) == 5
    # a copy of the sources with one byte changed in one RTL file
    source = tmp_path / "src"
    for folder in runner._BUILD_SOURCES:
        for path in (runner._SOURCE_ROOT / folder).rglob("*.py"):
            copy = source / path.relative_to(runner._SOURCE_ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(path.read_bytes())
    monkeypatch.setattr(runner, "_SOURCE_ROOT", source)
    assert build_key("kvmu", PARAMS, "verilator", ["-Wno-fatal"], waves=False) == base
    kvmu = source / "rtl" / "kvmu.py"
    kvmu.write_bytes(kvmu.read_bytes() + b"\n# edited\n")
    assert build_key("kvmu", PARAMS, "verilator", ["-Wno-fatal"], waves=False) != base


def test_a_stale_icarus_build_is_compiled_again_over_the_same_verilog(tmp_path, icarus):
    """A stale stamp over an unchanged Verilog file (another simulator version or other
    arguments leave one): Icarus's program is compiled again. (cocotb's runner compiles only
    when the sources are newer than the program, and the export leaves an unchanged file as
    it was.)"""
    def run():
        return run_cocotb("kvmu", KVMU_TB, params=PARAMS, simulator=icarus, seed=3,
                          testcase="scenario_accept", build_root=tmp_path)

    result = run()
    program = result.build_dir / "sim.vvp"
    verilog = result.build_dir / "kvmu.v"
    compiled_at, exported_at = program.stat().st_mtime_ns, verilog.stat().st_mtime_ns
    (result.build_dir / BUILD_STAMP).write_text("0" * 64)
    assert run().failed == 0
    assert verilog.stat().st_mtime_ns == exported_at  # the same file, left as it was
    assert program.stat().st_mtime_ns != compiled_at, "the stale program was kept"
