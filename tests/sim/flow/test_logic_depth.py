"""Logic depth of a mapped netlist: hand-built Yosys JSON netlists with known answers, and the
budget rule."""

from dataclasses import asdict

import pytest

from heteroreason.sim.flow.logic_depth import DepthReport, lut_budget, netlist_depth

IN, OUT = "input", "output"


def cell(ctype, directions, connections, parameters=None):
    return {"type": ctype, "port_directions": directions, "connections": connections,
            "parameters": parameters or {}}


def ff(d, q):
    return cell("FDRE", {"C": IN, "CE": IN, "R": IN, "D": IN, "Q": OUT},
                {"C": [1], "CE": ["1"], "R": ["0"], "D": [d], "Q": [q]})


def lut(inputs, out):
    return cell(f"LUT{len(inputs)}", {f"I{k}": IN for k in range(len(inputs))} | {"O": OUT},
                {f"I{k}": [b] for k, b in enumerate(inputs)} | {"O": [out]})


def carry8(ci, s_bits, o_bits, co_bits):
    return cell("CARRY8", {"CI": IN, "S": IN, "DI": IN, "O": OUT, "CO": OUT},
                {"CI": [ci], "S": s_bits, "DI": ["0"] * 8, "O": o_bits, "CO": co_bits})


def dsp(a, b, p, regs=0):
    return cell("DSP48E2", {"A": IN, "B": IN, "P": OUT}, {"A": a, "B": b, "P": p},
                {"AREG": regs, "BREG": regs, "MREG": regs, "PREG": regs})


def netlist(cells, netnames, ports=None):
    return {"modules": {"top": {
        "ports": ports or {"clk": {"direction": IN, "bits": [1]}},
        "cells": dict(enumerate(cells)),
        "netnames": {name: {"bits": bits} for name, bits in netnames.items()}}}}


def test_luts_and_a_carry_chain_between_registers():
    # q (10) -> LUT -> LUT -> two chained CARRY8s -> FF d (40)
    co1 = list(range(20, 28))
    co2 = list(range(30, 38))
    cells = [ff(9, 10), lut([10], 11), lut([11], 12),
             carry8("0", [12] + ["0"] * 7, list(range(50, 58)), co1),
             carry8(co1[-1], ["0"] * 8, list(range(60, 68)), co2),
             ff(co2[-1], 40), ff(10, 9)]
    report = netlist_depth(netlist(cells, {"start": [10], "end": [40]}), "top")
    assert (report.lut_levels, report.carry_bits) == (2, 16)
    assert report.levels == 2 + 2  # 16 carry bits count as two levels
    assert report.start.signal == "start" and report.end.signal == "end"
    assert report.longest_carry_bits == 16
    assert report.within(4) and not report.within(3)


def test_a_dsp_between_registers_counts_as_registered_one_behind_logic_does_not():
    packable = [ff(1, 10), ff(1, 11), dsp([10], [11], [12]), ff(12, 13)]
    report = netlist_depth(netlist(packable, {"a": [10], "b": [11], "p": [13]}), "top")
    assert (report.dsps, report.unregistered_dsps) == (1, 0)
    behind_logic = [ff(1, 10), ff(1, 11), lut([10], 14), dsp([14], [11], [12]), ff(12, 13)]
    report = netlist_depth(netlist(behind_logic, {"a": [10]}), "top")
    assert (report.dsps, report.unregistered_dsps) == (1, 1)
    assert not report.within(100)
    registered = [lut([1], 14), dsp([14], [14], [12], regs=1), lut([12], 15), ff(15, 16)]
    report = netlist_depth(netlist(registered, {}), "top")
    assert report.unregistered_dsps == 0
    assert report.levels == 1 + 1  # the LUT after the DSP, and the DSP as a start


def test_ports_count_as_registers():
    ports = {"clk": {"direction": IN, "bits": [1]}, "x": {"direction": IN, "bits": [5]},
             "y": {"direction": OUT, "bits": [7]}}
    report = netlist_depth(netlist([lut([5], 6), lut([6], 7)], {"x": [5], "y": [7]}, ports),
                           "top")
    assert report.levels == 2
    assert (report.start.cell_type, report.end.cell_type) == ("port", "port")


def test_bad_netlists_are_named():
    with pytest.raises(ValueError, match=r"^logic depth: module 'other' is not in the netlist "
                                         r"\(it has top\)$"):
        netlist_depth(netlist([], {}), "other")
    with pytest.raises(ValueError, match=r"^logic depth: no timing rule for cell type 'XYZ'$"):
        netlist_depth(netlist([cell("XYZ", {}, {})], {}), "top")
    loop = [lut([20], 21), lut([21], 20), ff(21, 22)]
    with pytest.raises(ValueError, match=r"^logic depth: combinational loop through "):
        netlist_depth(netlist(loop, {}), "top")


def test_lut_budget_follows_report_failfast():
    assert lut_budget(300e6) == 11  # 3.333 ns / 0.300 ns
    assert lut_budget(200e6) == 16
    assert lut_budget(300e6, speed_grade=1) == 9  # 0.350 ns
    assert lut_budget(300e6, speed_grade=3) == 13  # 0.250 ns
    with pytest.raises(ValueError, match=r"^UltraScale\+ speed grade must be one of -1, -2, -3, "
                                         r"not -4$"):
        lut_budget(300e6, speed_grade=4)
    with pytest.raises(ValueError, match=r"^clock must be positive, not 0 Hz$"):
        lut_budget(0)


def test_deepest_lists_each_end_signal_once_deepest_first():
    # a (10) -> 3 LUTs -> x[0] (40); a -> 1 LUT -> x[1] (41); a -> 2 LUTs -> y (42)
    cells = [ff(9, 10), ff(10, 9),
             lut([10], 11), lut([11], 12), lut([12], 13), ff(13, 40),
             lut([10], 14), ff(14, 41),
             lut([10], 15), lut([15], 16), ff(16, 42)]
    report = netlist_depth(netlist(cells, {"a": [10], "x": [40, 41], "y": [42]}), "top")
    summary = [(p.levels, p.start.signal, p.end.signal) for p in report.deepest]
    assert summary[:2] == [(3, "a", "x[0]"), (2, "a", "y")]  # x's bits together: its deepest
    assert [p.end.signal for p in report.deepest].count("x[1]") == 0
    assert DepthReport.from_dict(asdict(report)) == report
