"""Many-ported read-only tables split into copies of two read ports, in RTLIL: which memories
split, how the ports are shared out, each copy initialized alike, memories that are written left
whole; and Yosys reads the result (the RoPE unit's 8-ported tables: four copies each)."""

import re
import shutil
import subprocess

import pytest

from heteroreason.sim.flow.rom_ports import split_rom_read_ports


def memrd(name: str, memid: str) -> str:
    return (f"  cell $memrd_v2 {name}\n    parameter \\MEMID \"\\\\{memid}\"\n"
            f"    connect \\ADDR \\a\n  end\n")


def module(reads: int, ram_reads: int) -> str:
    cells = "".join(memrd(f"$r{k}", "rom") for k in range(reads))
    cells += "".join(memrd(f"$q{k}", "ram") for k in range(ram_reads))
    return ("module \\top\n  memory width 4 size 2 \\rom\n  memory width 4 size 2 \\ram\n"
            "  cell $meminit_v2 $i\n    parameter \\MEMID \"\\\\rom\"\n"
            "    connect \\DATA 8'10100101\n  end\n"
            "  cell $memwr_v2 $w\n    parameter \\MEMID \"\\\\ram\"\n  end\n"
            + cells + "end\n")


def memids(text: str) -> list[str]:
    return re.findall(r'cell \$memrd_v2 \S+\n    parameter \\MEMID "\\\\(\S+)"', text)


def test_a_table_of_five_read_ports_becomes_three_copies():
    out = split_rom_read_ports(module(5, 3))
    assert memids(out) == ["rom", "rom", "rom$copy1", "rom$copy1", "rom$copy2",
                           "ram", "ram", "ram"]  # the written memory keeps its three ports
    assert re.findall(r"memory width 4 size 2 \\(\S+)", out) == \
        ["rom", "rom$copy1", "rom$copy2", "ram"]
    inits = re.findall(r'cell \$meminit_v2 (\S+)\n    parameter \\MEMID "\\\\(\S+)"\n'
                       r"    connect \\DATA (\S+)", out)
    assert inits == [("$i", "rom", "8'10100101"), ("$i$copy1", "rom$copy1", "8'10100101"),
                     ("$i$copy2", "rom$copy2", "8'10100101")]


@pytest.mark.parametrize("reads", [1, 2])
def test_a_table_of_two_ports_or_fewer_is_left_alone(reads):
    text = module(reads, 1)
    assert split_rom_read_ports(text) == text


def test_a_cell_without_its_end_is_refused():
    with pytest.raises(ValueError, match="without its end"):
        split_rom_read_ports("module \\top\n  cell $memrd_v2 $r\nend\n")


@pytest.mark.skipif(shutil.which("yosys") is None, reason="no native yosys")
def test_yosys_reads_the_split_rope_tables(tmp_path):
    from amaranth.back import rtlil

    from heteroreason.sim.flow.export import build_top

    rope = build_top("rope", {"preset": "test-0.5b-layer", "width": 8})
    text = rtlil.convert(rope, name="rope", emit_src=False)
    (tmp_path / "rope.il").write_text(split_rom_read_ports(text))
    script = "read_rtlil rope.il; proc; opt_clean; memory -nomap; select -list t:$mem_v2"
    proc = subprocess.run(["yosys", "-q", "-p", f"{script}; tee -o mems.txt select -list "
                           "t:$mem_v2"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    mems = (tmp_path / "mems.txt").read_text().split()
    assert sum("cos" in m for m in mems) == 4 and sum("sin" in m for m in mems) == 4
