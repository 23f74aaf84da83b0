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


# a unit with a part of its own (SPLIT_UNITS): att's flip-flop takes the glue's r, its LUT
# feeds its part pv (a DSP, then a flip-flop), which drives the top's output y
SPLIT_NETLIST = """
.model top
.inputs clk a
.outputs y
.subckt BUFG I=clk O=gclk
.subckt FDRE C=gclk CE=$true R=$false D=a Q=r
.subckt top.att clk=gclk x=r y=y
.end
.model top.att
.inputs clk x
.outputs y
.subckt FDRE C=clk CE=$true R=$false D=x Q=s
.subckt LUT1 I0=s O=t
.subckt top.att.pv clk=clk i=t o=y
.end
.model top.att.pv
.inputs clk i
.outputs o
.subckt DSP48E2 A=i B=i P=pp
.subckt FDRE C=clk CE=$true R=$false D=pp Q=o
.end
""" + PRIMITIVES

SPLIT_STAT = """{
   "modules": {
      "\\\\top": {"num_cells_by_type": {"BUFG": 1, "FDRE": 1, "top.att": 1}},
      "\\\\top.att": {"num_cells_by_type": {"FDRE": 1, "LUT1": 1, "top.att.pv": 1}},
      "\\\\top.att.pv": {"num_cells_by_type": {"DSP48E2": 1, "FDRE": 1}}
   },
   "design": {}
}
"""


def test_a_split_units_part_is_a_unit_with_its_own_links(tmp_path):
    """``att.pv`` is a unit of its own: its cells leave ``att``'s, a top net on ``att``'s port
    is followed to the part that drives it, and ``att``'s own nets into the part are links."""
    (tmp_path / "top.blif").write_text(SPLIT_NETLIST)
    (tmp_path / "top.stat.json").write_text(SPLIT_STAT)
    h = read_hierarchy(tmp_path / "top.stat.json", tmp_path / "top.blif", "top")
    assert set(h.units) == {GLUE, "att", "att.pv"}
    att, pv = h.units["att"], h.units["att.pv"]
    assert (att.lut, att.ff, att.dsp) == (1, 1, 0)
    assert (pv.lut, pv.ff, pv.dsp) == (0, 1, 1)
    assert (h.total.lut, h.total.ff, h.total.dsp) == (1, 3, 1)
    f = frozenset
    assert h.links == {
        Link(f({GLUE, PORTS}), PORTS, True, f()): 1,          # a into the glue's flip-flop
        Link(f({GLUE, "att"}), GLUE, True, f()): 1,           # r into att's flip-flop
        Link(f({"att.pv", PORTS}), "att.pv", True, f()): 1,   # y from pv's flip-flop
        Link(f({"att", "att.pv"}), "att", False, f({"att.pv"})): 1,  # t: a LUT into a DSP
    }
    reg = h.registration
    assert (reg["att"].inputs, reg["att"].registered_inputs, reg["att"].outputs,
            reg["att"].registered_outputs) == (1, 1, 1, 1)
    assert (reg["att.pv"].inputs, reg["att.pv"].registered_inputs, reg["att.pv"].outputs,
            reg["att.pv"].registered_outputs) == (1, 0, 1, 1)


# a unit that passes a wire through (x to y: the glue's flip-flop to the top's output) and ties
# an output to a constant (k), beside a real input (z into its flip-flop)
THROUGH_NETLIST = """
.model top
.inputs clk a
.outputs y k
.subckt BUFG I=clk O=gclk
.subckt FDRE C=gclk CE=$true R=$false D=a Q=r
.subckt top.u clk=gclk x=r z=r y=y c=k
.end
.model top.u
.inputs clk x z
.outputs y c
.conn x y
.conn $false c
.subckt FDRE C=clk CE=$true R=$false D=z Q=zq
.end
""" + PRIMITIVES

THROUGH_STAT = """{
   "modules": {
      "\\\\top": {"num_cells_by_type": {"BUFG": 1, "FDRE": 1, "top.u": 1}},
      "\\\\top.u": {"num_cells_by_type": {"FDRE": 1}}
   },
   "design": {}
}
"""


def test_a_wire_through_a_unit_and_a_constant_are_no_link(tmp_path):
    """r reaches the top's output y through u without entering it (one net from the glue's
    flip-flop to the ports) and u's flip-flop (z); k is a constant: nothing crosses."""
    (tmp_path / "top.blif").write_text(THROUGH_NETLIST)
    (tmp_path / "top.stat.json").write_text(THROUGH_STAT)
    h = read_hierarchy(tmp_path / "top.stat.json", tmp_path / "top.blif", "top")
    f = frozenset
    assert h.links == {
        Link(f({GLUE, "u", PORTS}), GLUE, True, f()): 1,   # r: to u's flip-flop and to y
        Link(f({GLUE, PORTS}), PORTS, True, f()): 1,       # a into the glue's flip-flop
    }


# the far half of a crossing beside the glue (``top.xing_u_rx``): u's flip-flop drives its
# flip-flop, whose output a glue LUT takes to the top's output y
GLUE_PART_NETLIST = """
.model top
.inputs clk a
.outputs y
.subckt BUFG I=clk O=gclk
.subckt top.u clk=gclk x=a q=uq
.subckt top.xing_u_rx clk=gclk d=uq q=xq
.subckt LUT1 I0=xq O=y
.end
.model top.u
.inputs clk x
.outputs q
.subckt FDRE C=clk CE=$true R=$false D=x Q=q
.end
.model top.xing_u_rx
.inputs clk d
.outputs q
.subckt FDRE C=clk CE=$true R=$false D=d Q=q
.end
""" + PRIMITIVES

GLUE_PART_STAT = """{
   "modules": {
      "\\\\top": {"num_cells_by_type": {"BUFG": 1, "LUT1": 1, "top.u": 1,
                                        "top.xing_u_rx": 1}},
      "\\\\top.u": {"num_cells_by_type": {"FDRE": 1}},
      "\\\\top.xing_u_rx": {"num_cells_by_type": {"FDRE": 1}}
   },
   "design": {}
}
"""


def test_a_glue_part_is_the_glue(tmp_path):
    """``xing_u_rx`` is no unit: its flip-flop is the glue's, and u's flip-flop into it is a
    link between u and the glue, registered on both sides."""
    (tmp_path / "top.blif").write_text(GLUE_PART_NETLIST)
    (tmp_path / "top.stat.json").write_text(GLUE_PART_STAT)
    h = read_hierarchy(tmp_path / "top.stat.json", tmp_path / "top.blif", "top")
    assert set(h.units) == {GLUE, "u"}
    assert (h.units[GLUE].lut, h.units[GLUE].ff) == (1, 1)
    f = frozenset
    assert h.links == {
        Link(f({"u", PORTS}), PORTS, True, f()): 1,     # a into u's flip-flop
        Link(f({"u", GLUE}), "u", True, f()): 1,        # u's flip-flop into the glue's
        Link(f({GLUE, PORTS}), GLUE, False, f()): 1,    # the glue's LUT to y
    }
