"""A hierarchical netlist read back: resources per unit, the bits between units, loads
flattened through the hierarchy (the clock left out), and which port bits are registered — on a
netlist written by hand, whose answers are counted here by eye."""

import json
import shutil

import pytest

from heteroreason.sim.flow.hierarchy import (
    GLUE,
    PORTS,
    Link,
    read_hierarchy,
    synthesize_hierarchy,
)
from heteroreason.sim.flow.synth import read_stat_json

PRIMITIVES = """
.model BUFG
.inputs I
.outputs O
.blackbox
.end
.model FDRE
.inputs C CE R D
.outputs Q
.blackbox
.end
.model LUT1
.inputs I0
.outputs O
.blackbox
.end
.model LUT2
.inputs I0 I1
.outputs O
.blackbox
.end
.model DSP48E2
.inputs A B
.outputs P
.blackbox
.end
"""

# top: a flip-flop (glue) feeds u1, u1's output w goes to u2 and to a LUT of the glue, u2
# drives the output y; a[0] and a[1] come in from outside
NETLIST = """
.model top
.inputs clk a[0] a[1]
.outputs y
.subckt BUFG I=clk O=gclk
.subckt FDRE C=gclk CE=$true R=$false D=a[0] Q=r
.subckt top.u1 clk=gclk x=r z=w
.subckt top.u2 clk=gclk x=w q=y
.subckt LUT2 I0=a[1] I1=w O=m
.subckt FDRE C=gclk CE=$true R=$false D=m Q=m_q
.end
.model top.u1
.inputs clk x
.outputs z
.subckt LUT1 I0=x O=n
.subckt FDRE C=clk CE=$true R=$false D=n Q=z
.subckt DSP48E2 A=x B=x P=p
.end
.model top.u2
.inputs clk x
.outputs q
.subckt FDRE C=clk CE=$true R=$false D=x Q=q1
.subckt FDRE C=clk CE=$true R=$false D=x \\
Q=q2
.conn q1 q
.end
""" + PRIMITIVES

# Yosys 0.23's stat -json, with the hierarchy line it prints into the JSON
STAT = """{
   "modules": {
      "\\\\top": {"num_cells_by_type": {"BUFG": 1, "FDRE": 2, "LUT2": 1, "top.u1": 1,
                                        "top.u2": 1}},
      "\\\\top.u1": {"num_cells_by_type": {"LUT1": 1, "FDRE": 1, "DSP48E2": 1}},
      "\\\\top.u2": {"num_cells_by_type": {"FDRE": 2}}
   },
       top.u1      1
   "design": {}
}
"""


@pytest.fixture
def netlist(tmp_path):
    (tmp_path / "top.blif").write_text(NETLIST)
    (tmp_path / "top.stat.json").write_text(STAT)
    return read_hierarchy(tmp_path / "top.stat.json", tmp_path / "top.blif", "top")


def test_units_are_the_tops_children_with_the_glue(netlist):
    assert set(netlist.units) == {GLUE, "u1", "u2"}
    assert (netlist.units["u1"].lut, netlist.units["u1"].ff, netlist.units["u1"].dsp) == \
        (1, 1, 1)
    assert (netlist.units[GLUE].lut, netlist.units[GLUE].ff) == (1, 2)
    assert (netlist.total.lut, netlist.total.ff, netlist.total.dsp) == (2, 5, 1)


def test_links_count_the_bits_between_units_with_their_registers(netlist):
    f = frozenset
    assert netlist.links == {
        # r: the glue's flip-flop into u1's LUT and DSP
        Link(f({GLUE, "u1"}), GLUE, True, f({"u1"})): 1,
        # w: u1's flip-flop into u2's flip-flops and the glue's LUT
        Link(f({GLUE, "u1", "u2"}), "u1", True, f({GLUE})): 1,
        # y: u2's flip-flop (through an alias) out of the top
        Link(f({"u2", PORTS}), "u2", True, f()): 1,
        # a[0] into the glue's flip-flop, a[1] into its LUT (the clock is left out)
        Link(f({GLUE, PORTS}), PORTS, True, f()): 1,
        Link(f({GLUE, PORTS}), PORTS, True, f({GLUE})): 1,
    }


def test_loads_are_counted_through_the_hierarchy(netlist):
    loads = {(n.module, n.net): (n.loads, n.driver) for n in netlist.largest_nets}
    assert loads[("top", "w")] == (3, "top.u1")       # u2's two flip-flops and the glue's LUT
    assert loads[("top", "r")] == (3, "FDRE")         # u1's LUT, its DSP's A and B
    assert loads[("top.u1", "x")] == (3, "input")
    assert not any(n.net in ("clk", "gclk") for n in netlist.largest_nets)
    assert [n.loads for n in netlist.largest_nets] == \
        sorted((n.loads for n in netlist.largest_nets), reverse=True)


def test_registered_ports(netlist):
    u1, u2 = netlist.registration["u1"], netlist.registration["u2"]
    assert (u1.inputs, u1.registered_inputs, u1.outputs, u1.registered_outputs) == (1, 0, 1, 1)
    assert (u2.inputs, u2.registered_inputs, u2.outputs, u2.registered_outputs) == (1, 1, 1, 1)


@pytest.mark.skipif(shutil.which("yosys") is None, reason="no native yosys")
def test_a_synthesized_hierarchy_adds_up(tmp_path):
    """Two children of a small Amaranth top through the native Yosys: the units' resources
    add up to the design's."""
    from amaranth.back import rtlil

    from heteroreason.sim.flow.export import build_top

    (tmp_path / "kv_frontend.il").write_text(
        rtlil.convert(build_top("kv_frontend", {}), name="kv_frontend", emit_src=False))
    h = synthesize_hierarchy(tmp_path / "kv_frontend.il", "kv_frontend")
    assert len(h.units) >= 2 and GLUE in h.units
    for field in ("lut", "ff", "dsp", "bram18k", "uram", "carry"):
        assert sum(getattr(r, field) for r in h.units.values()) == getattr(h.total, field)
    assert h.links and all(n > 0 for n in h.links.values())
    json.dumps([n.__dict__ for n in h.largest_nets])


def test_stat_json_of_yosys_0_23_reads_without_its_hierarchy_lines(tmp_path):
    """The one reader of ``stat -json`` (export --synth, the fit): the tree lines Yosys 0.23
    writes into a hierarchical design's JSON are dropped, nothing else."""
    (tmp_path / "s.json").write_text(STAT)
    stat = read_stat_json(tmp_path / "s.json")
    assert set(stat) == {"modules", "design"}
    assert stat["modules"]["\\top.u2"]["num_cells_by_type"] == {"FDRE": 2}
