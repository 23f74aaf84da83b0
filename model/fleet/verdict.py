"""The fleet's answer first: does HeteroReason carry more goodput per kW than GPU-only serving
at the SLO, on which board, holding how many problems a board.

The rows are :func:`~heteroreason.model.fleet.search.compare_points`' capacities (three a
configuration and dataset: the GPU-only ``t2`` fleet, the HeteroReason fleet of as many devices,
the HeteroReason fleet of equal active power), each as
:meth:`~heteroreason.model.fleet.search.CapacityResult.as_dict` gives it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.system.config import system_config

__all__ = ["CellVerdict", "cell_verdicts", "fleet_verdict"]


@dataclass(frozen=True)
class CellVerdict:
    """One configuration and dataset: HeteroReason's better fleet against ``t2``'s."""

    config: str
    datasets: str
    t2_goodput_per_kw: float
    hr_goodput_per_kw: float
    hr_pools: str
    board_contexts: int | None

    @property
    def ratio(self) -> float:
        return self.hr_goodput_per_kw / self.t2_goodput_per_kw


def cell_verdicts(rows: Sequence[dict]) -> list[CellVerdict]:
    if not rows or len(rows) % 3:
        raise FleetError(f"a verdict needs the rows of compare_points, three a cell, not "
                         f"{len(rows)} rows")
    out = []
    for k in range(0, len(rows), 3):
        t2, *hr = rows[k:k + 3]
        if t2["mode"] != "t2" or any(r["mode"] != "heteroreason" for r in hr):
            raise FleetError(f"rows {k}-{k + 2} are not a t2 fleet and two HeteroReason fleets "
                             f"(modes {[r['mode'] for r in rows[k:k + 3]]})")
        best = max(hr, key=lambda r: r["goodput_per_kw"])
        out.append(CellVerdict(t2["config"], t2["datasets"], t2["goodput_per_kw"],
                               best["goodput_per_kw"],
                               f"{best['drafts']}:{best['prms']}:{best['targets']}",
                               best["board_contexts"]))
    return out


def _board(fpga: str, config: str, contexts: set) -> str:
    design = system_config(config, fpga=fpga).fpga_contexts
    held = ", ".join(str(c) for c in sorted(contexts))
    plural = "s" if contexts != {1} else ""
    if design is None:
        return (f"FPGA '{fpga}': {held} problem{plural} a board, as many as its HBM holds "
                "(the paper artifact's board; its RTL is not this project's)")
    engine = "its DraftEngine holds one" if design == 1 else \
        f"its MultiDraftEngine holds {design}, drafting several a pass with --per-pass"
    if contexts == {design}:
        return (f"FPGA '{fpga}': {held} problem{plural} a board, as this project's RTL builds "
                f"it ({engine})")
    return (f"FPGA '{fpga}': {held} problem{plural} a board, a what-if: this project's RTL "
            f"holds {design}")


def fleet_verdict(rows: Sequence[dict], slo_s: float, *, fpga: str, width: int = 100) -> str:
    """One sentence with its figures: HeteroReason's better fleet (of as many devices, or of
    equal power) against GPU-only ``t2`` on goodput per kW at its capacity, in every cell."""
    cells = cell_verdicts(rows)
    wins = sum(c.ratio >= 1 for c in cells)
    outcome = ("wins against" if wins == len(cells) else
               "loses to" if wins == 0 else f"wins in {wins} of {len(cells)} cells against")
    figures = ", ".join(f"{c.config} {c.datasets} {c.ratio:.2f}x ({c.hr_pools}: "
                        f"{c.hr_goodput_per_kw:.3f} against {c.t2_goodput_per_kw:.3f})"
                        for c in cells)
    contexts = {c.board_contexts for c in cells}
    text = (f"Verdict: HeteroReason {outcome} GPU-only t2 serving on goodput per kW at "
            f"P99 <= {slo_s:g} s, its better fleet (as many devices, or equal power) against "
            f"t2's, problems/s per kW at capacity: {figures}. "
            f"{_board(fpga, cells[0].config, contexts)}.")
    return "\n".join(textwrap.wrap(text, width))
