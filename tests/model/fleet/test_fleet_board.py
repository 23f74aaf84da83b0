"""The fleet's FPGA board as the RTL builds it: the problems a board holds (its engine's, at
most its HBM's), a board never serving more at once, and the fleet's verdict sentence."""

from __future__ import annotations

import pytest

from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.engine import FleetSpec, simulate_fleet
from heteroreason.model.fleet.verdict import cell_verdicts, fleet_verdict
from heteroreason.model.fleet.workload import Arrivals, Workload, sample_workload
from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.system.config import ServingMode, system_config
from heteroreason.model.timing.fpga.platform import BOARDS, ENGINE_CONTEXTS
from heteroreason.model.workload.bundled import load_bundled

SEED = 20261205


def _spec(fpga=None, **kw):
    return FleetSpec(system_config("config1", fpga=fpga), ServingMode.HETEROREASON, **kw)


def _naive_hbm_slots(board: str) -> int:
    """Written from docs/design.md: 8-bit weights, then 8-bit K and V of every layer's KV heads
    at the PRM's context limit, as many problems as fit."""
    draft, prm = qwen2_config("qwen2.5-0.5b"), qwen2_config(system_config("config1").prm.model)
    per_token = 2 * draft.layers * draft.kv_heads * draft.head_dim
    return int((BOARDS[board].hbm_bytes - draft.params) // (per_token * prm.max_context))


def test_the_artifact_board_holds_what_its_hbm_holds_and_the_rtl_one_problem():
    assert _spec().slots() == _naive_hbm_slots("u280-300") > 100
    assert _spec("rtl-u280-300").slots() == 1
    assert _spec("rtl-v80").slots() == 1
    # the designs built for a pass of four: the MultiDraftEngine's 32 (docs/design.md §4.7)
    assert _spec("rtl-u280-300-batch4").slots() == ENGINE_CONTEXTS == 32
    assert _spec("rtl-v80-batch4").slots() == ENGINE_CONTEXTS
    assert _spec("rtl-v80").hbm_slots() == _naive_hbm_slots("v80")
    # a what-if board: as many as asked, up to the HBM's
    assert _spec("rtl-u280-300", draft_slots=16).slots() == 16
    limit = _naive_hbm_slots("u280-300")
    with pytest.raises(FleetError, match=f"draft_slots {limit + 1}: board u280-300's HBM "
                                         f"holds {limit} problems"):
        _spec("rtl-u280-300", draft_slots=limit + 1).slots()


@pytest.mark.parametrize("contexts", [1, 3])
def test_a_board_never_serves_more_problems_than_it_holds(contexts):
    traces = load_bundled("gsm8k")
    problems, times = sample_workload(Workload.single("gsm8k", traces), Arrivals.poisson(1.0),
                                      120, SEED)
    spec = _spec("rtl-u280-300", drafts=2, prms=1, targets=1, draft_slots=contexts)
    run = simulate_fleet(spec, problems, times, record_until_ms=float("inf"))
    assert len(run.problems) == len(problems)
    spans: dict[tuple[str, int], list[float]] = {}
    for a in run.activity:
        if a.pool == "draft":
            span = spans.setdefault((a.device, a.problem), [a.start_ms, a.end_ms])
            span[0], span[1] = min(span[0], a.start_ms), max(span[1], a.end_ms)
    for device in ("draft0", "draft1"):
        edges = sorted((t, +1 if k == 0 else -1) for (d, _), span in spans.items()
                       if d == device for k, t in enumerate(span))
        held = peak = 0
        for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # ends first at a tie
            held += step
            peak = max(peak, held)
        assert 1 <= peak <= contexts, (device, peak, f"seed {SEED}")


def _row(mode, gpkw, drafts=2, contexts=None):
    return {"mode": mode, "config": "config1", "datasets": "gsm8k", "goodput_per_kw": gpkw,
            "drafts": drafts, "prms": 1, "targets": 1,
            "board_contexts": contexts if mode == "heteroreason" else None}


def test_the_verdict_takes_heteroreasons_better_fleet_against_t2():
    rows = [_row("t2", 2.0), _row("heteroreason", 1.0, 2, 1), _row("heteroreason", 1.5, 8, 1)]
    (cell,) = cell_verdicts(rows)
    assert cell.ratio == pytest.approx(0.75) and cell.hr_pools == "8:1:1"
    text = " ".join(fleet_verdict(rows, 120, fpga="rtl-u280-300").split())
    assert text.startswith("Verdict: HeteroReason loses to GPU-only t2 serving")
    assert "config1 gsm8k 0.75x (8:1:1: 1.500 against 2.000)" in text
    assert "as this project's RTL builds it" in text
    both = [*rows, _row("t2", 1.0), _row("heteroreason", 1.2, 2, 4),
            _row("heteroreason", 0.5, 8, 4)]
    text = " ".join(fleet_verdict(both, 120, fpga="rtl-u280-300").split())
    assert "wins in 1 of 2 cells against" in text and "a what-if" in text
    assert "wins against" in " ".join(fleet_verdict(both[3:], 60, fpga="artifact").split())


def test_the_verdict_refuses_rows_that_are_not_compare_cells():
    with pytest.raises(FleetError, match="three a cell, not 2 rows"):
        cell_verdicts([_row("t2", 1.0), _row("heteroreason", 1.0)])
    with pytest.raises(FleetError, match="not a t2 fleet and two HeteroReason"):
        cell_verdicts([_row("heteroreason", 1.0)] * 3)
