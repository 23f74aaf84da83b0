"""The binding units counted from their structure: the DSP forms against the multipliers the RTL
elaborates (each ``$mul`` one DSP48E2 when it fits 27 x 18) and against the committed synthesis;
the memories as Yosys maps them; and the design search's placement of these units per SLR."""

import re
from types import SimpleNamespace

import pytest
from amaranth.back import rtlil

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.fit import load_fit_evidence
from heteroreason.model.timing.fpga.platform import design_for
from heteroreason.model.timing.fpga.unit_resources import (
    attention_dsp,
    binding_units,
    core_dsp,
    memory_blocks,
    mvu_dsp,
    place_binding_units,
)
from heteroreason.rtl.decoder.attention import Attention
from heteroreason.rtl.decoder.mvu import MatVecUnit
from heteroreason.rtl.decoder.params import DecoderParams

_CELL = re.compile(r"cell \$mul \S+\n((?:\s+parameter .*\n)+)")


def multipliers(component) -> dict[str, int]:
    """``$mul`` cells per module of ``component``'s RTLIL, each checked to fit one DSP48E2
    (operands of at most 27 and 18 bits, either way round)."""
    out = {}
    for module in rtlil.convert(component).split("\nmodule ")[1:]:
        name = module.split("\n", 1)[0].strip().lstrip("\\")
        cells = _CELL.findall(module)
        for params in cells:
            widths = sorted(int(w) for w in re.findall(r"\\[AB]_WIDTH (\d+)", params))
            assert widths[0] <= 18 and widths[1] <= 27, (name, widths)
        if cells:
            out[name] = len(cells)
    return out


@pytest.mark.parametrize("heads, kv_rows, width", [(3, 4, 4), (2, 1, 8), (1, 2, 2)])
def test_the_attentions_dsp_form_is_its_multipliers(heads, kv_rows, width):
    """The scores' packed pairs and the exponentials' requantizers in ``att``, the values'
    products, the probabilities' partial products and the output requantizers in ``att.pv``:
    as many as the elaborated unit has multipliers, module by module."""
    dut = Attention(head_dim=8, kv_heads=1, layers=1, max_context=16, heads=heads,
                    width=width, external_kv=True, kv_rows=kv_rows)
    muls = multipliers(dut)
    assert attention_dsp(head_dim=8, heads=heads, kv_rows=kv_rows, width=width) == \
        {"att": muls["top"], "att.pv": muls["top.pv"]}


@pytest.mark.parametrize("lanes, k, vectors", [(8, 1, 1), (8, 4, 1), (4, 3, 1), (8, 2, 3)])
def test_the_mvus_dsp_form_is_its_multipliers(lanes, k, vectors):
    """Two rows' weights a multiplier with one vector (an odd row alone), two vectors with
    several, and a requantizer (six pieces) a row and vector."""
    # (the unit's parameters: DecoderParams takes powers of two of rows)
    params = SimpleNamespace(lanes=lanes, rows_per_beat=k, beat_bytes=lanes * k)
    dut = MatVecUnit(lanes=lanes, max_beats=2, max_rows=4, rows_per_beat=k, vectors=vectors)
    assert mvu_dsp(params, vectors) == sum(multipliers(dut).values())


def test_the_forms_match_the_committed_synthesis_of_this_rtl():
    """Every design of the committed fit evidence (this RTL's: a stale file fails the fit
    evidence's own test): the binding units' DSP slices, block RAMs and UltraRAMs, and the
    core's DSP slices, as synthesized."""
    evidence = load_fit_evidence()
    assert evidence.designs
    for fit in evidence.designs:
        params, config = fit.design.params, qwen2_config(fit.design.preset)
        for unit, use in binding_units(config, params).items():
            if unit in fit.units:
                structural = {r: use[r] for r in ("dsp", "bram18k", "uram")}
                assert {r: fit.units[unit][r] for r in structural} == structural, \
                    (fit.name, unit)
        assert core_dsp(config, params) == fit.total["dsp"], fit.name


@pytest.mark.parametrize("width, depth, blocks", [
    (28672, 2048, (0, 399)),    # the 896-lane design's weight buffer: a URAM a 72-bit column
    (14336, 4096, (0, 200)),    # 448 lanes x 4 rows, 4,096 beats: one URAM deep
    (616, 16384, (0, 35)),      # the U280 design's scores (7 heads, 4 rows, a half a stage)
    (448, 8192, (0, 13)),       # and its exponentials
    (1024, 256, (29, 0)),       # test-small's weight buffer, in block RAM
])
def test_memories_map_as_yosys_maps_them(width, depth, blocks):
    """As synthesized (Yosys 0.23, the committed evidence of RTL 7117a70c3394: its weight buffer
    399 UltraRAMs, the attention's 48 = 35 + 13; test-small's buffer 29 18-Kbit blocks)."""
    assert memory_blocks(width, depth) == blocks


def test_the_boards_designs_keep_their_binding_units_within_their_slrs():
    """The design search's choice for each board: the MVU and its buffer beside the HBM, the
    attention's two units each whole in an SLR, every one within the failfast guidelines;
    the 896-lane design synthesized before (399 UltraRAMs beside the HBM) is refused."""
    config = qwen2_config("qwen2.5-0.5b")
    for board in ("u280-200", "u280-300", "v80"):
        plan = place_binding_units(config, design_for(config, board), board)
        assert plan.fits, (board, plan.over)
        assert plan.where["mvu"] == plan.where["wbuf"] == plan.floor.hbm_slr
    old = DecoderParams(896, 3584, heads_parallel=7, weight_buffer=2048, vector_width=16,
                        param_width=8, rows_per_beat=4, external_kv=True, kv_rows=4)
    plan = place_binding_units(config, old, "u280-300")
    assert not plan.fits and any("URAM 399 > 256" in o for o in plan.over), plan.over


def test_a_board_whose_slrs_hold_no_design_is_refused_naming_the_excess(monkeypatch):
    """The search refuses every design its SLRs cannot hold and says why: the nearest one's
    SLR, resource and both numbers."""
    from dataclasses import replace

    from heteroreason.model.timing.fpga import unit_resources
    from heteroreason.model.timing.fpga.floorplan import board_floor
    from heteroreason.model.timing.fpga.platform import fpga_board

    floor = board_floor("u280-300")
    tiny = replace(floor, slrs=tuple(replace(s, dsp=500) for s in floor.slrs))
    monkeypatch.setattr(unit_resources, "_floor", lambda board: tiny)
    board = replace(fpga_board("u280-300"), name="u280-300-tiny-slrs")
    with pytest.raises(ValueError, match=r"^no design for qwen2\.5-0\.5b fits "
                       r"u280-300-tiny-slrs; the nearest \(\d+ lanes x \d rows, \d KV rows a "
                       r"cycle\) breaks its SLRs' guidelines: SLR\d DSP [\d,]+ > 400 "
                       r"\(80% of 500\)"):
        design_for("qwen2.5-0.5b", board)
