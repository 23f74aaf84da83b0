"""What a fleet is: its pools and their policies (:class:`FleetSpec`), the routing rules, and the
problems an FPGA board holds (:func:`fpga_slots`; its design's contexts, what its HBM holds).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from heteroreason.model import checks
from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.limits import MAX_POOL
from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.system.config import ServingMode, SystemConfig
from heteroreason.model.timing.batch_cost import (
    GPU_MEMORY_UTILIZATION,
    MAX_BATCH_ITEMS,
    PER_ITEM_MS,
    BatchCost,
    batch_cost,
)
from heteroreason.model.timing.energy import DevicePower
from heteroreason.model.timing.fpga.passes import MOST_A_PASS, PassTable, pass_table
from heteroreason.model.timing.fpga.platform import BOARDS

__all__ = ["FPGA_BYTES_PER_WEIGHT", "FPGA_KV_BYTES_PER_ELEMENT", "FleetSpec", "Routing",
           "fpga_slots"]

# the FPGA keeps W8A8 weights and an 8-bit KV cache in HBM (docs/design.md)
FPGA_BYTES_PER_WEIGHT = 1.0
FPGA_KV_BYTES_PER_ELEMENT = 1.0


class Routing(str, enum.Enum):
    LEAST = "least"
    ROUND_ROBIN = "round-robin"

    @classmethod
    def parse(cls, name: str) -> Routing:
        return checks.member(cls, name, what="routing", error=FleetError)


def fpga_slots(board: str, draft_model: str, max_context_tokens: int) -> int:
    """Problems one board holds: its HBM less the draft's 8-bit weights, over the 8-bit KV of
    ``max_context_tokens`` tokens."""
    spec = BOARDS[board]
    model = qwen2_config(draft_model)
    free = spec.hbm_bytes - model.params * FPGA_BYTES_PER_WEIGHT
    per_problem = model.kv_bytes_per_token(FPGA_KV_BYTES_PER_ELEMENT) * max_context_tokens
    return int(free // per_problem) if free > 0 else 0


@dataclass(frozen=True)
class FleetSpec:
    """Pools and their policies. ``draft_slots``: problems a draft device holds at once (None:
    an FPGA's from its HBM and the PRM's context limit, a GPU's unbounded but for its KV)."""

    config: SystemConfig
    mode: ServingMode
    drafts: int = 1
    prms: int = 1
    targets: int = 1
    routing: Routing = Routing.LEAST
    draft_slots: int | None = None
    memory_utilization: float = GPU_MEMORY_UTILIZATION
    max_batch_items: int = MAX_BATCH_ITEMS
    per_item_ms: float = PER_ITEM_MS
    max_prefetch_items: int | None = None  # step-ahead prefetches a target batch may hold
    per_pass: int = 1  # drafts an FPGA board runs a pass of its weights (issue 43's engine)

    def __post_init__(self):
        for key in ("drafts", "prms", "targets"):
            value = getattr(self, key)
            checks.integer(f"pool size {key}", value, low=1, high=MAX_POOL, error=FleetError)
        if self.draft_slots is not None:
            checks.integer("draft_slots", self.draft_slots, low=1, note="or None",
                           error=FleetError)
        if self.max_prefetch_items is not None:
            checks.integer("max_prefetch_items", self.max_prefetch_items, low=0,
                           note="or None", error=FleetError)
        checks.power_of_two("per_pass", self.per_pass, high=MOST_A_PASS, error=FleetError)
        if not isinstance(self.routing, Routing):
            object.__setattr__(self, "routing", Routing.parse(self.routing))

    @property
    def draft_on_fpga(self) -> bool:
        return self.config.draft(self.mode).on_fpga

    def cost(self, role: str) -> BatchCost:
        t = {"draft": self.config.draft_gpu, "prm": self.config.prm,
             "target": self.config.target}[role]
        return batch_cost(t, memory_utilization=self.memory_utilization,
                          max_batch_items=self.max_batch_items, per_item_ms=self.per_item_ms)

    def slots(self) -> int | None:
        """Problems a draft device holds at once: ``draft_slots``; else an FPGA board's, the
        fewer of what its engine holds (:attr:`SystemConfig.fpga_contexts`) and what its HBM
        holds at the PRM's context limit; a draft GPU's: unbounded but for its KV."""
        if not self.draft_on_fpga:
            return self.draft_slots
        hbm = self.hbm_slots()
        if self.draft_slots is not None:
            if self.draft_slots > hbm:
                raise FleetError(
                    f"draft_slots {self.draft_slots}: board {self.config.fpga_power.name}'s HBM "
                    f"holds {hbm} problems (its weights, then each problem's 8-bit KV at the "
                    f"PRM's context limit of {self._prm_context()} tokens)")
            return self.draft_slots
        contexts = self.config.fpga_contexts
        return hbm if contexts is None else min(hbm, contexts)

    def pass_table(self) -> PassTable | None:
        """The board's passes when it drafts several problems a pass (None: one job at a
        time); refused where no pass model exists or the board holds fewer problems."""
        if self.per_pass == 1:
            return None
        if not self.draft_on_fpga or self.config.fpga_contexts is None:
            raise FleetError(f"per_pass {self.per_pass}: only an FPGA board of this project's "
                             "design drafts several problems a pass (--fpga rtl-*; the "
                             "artifact's board and a GPU draft have no pass model)")
        slots = self.slots()
        if self.per_pass > slots:
            raise FleetError(f"per_pass {self.per_pass}: a board holds {slots} problem(s) "
                             "(draft_slots / --contexts), fewer than a pass drafts for")
        try:
            return pass_table(self.config.draft_model.name, self.config.fpga_power.name,
                              self.per_pass)
        except ValueError as exc:  # no design of that many a pass fits the board
            raise FleetError(f"per_pass {self.per_pass}: {exc}") from None

    def _prm_context(self) -> int:
        return qwen2_config(self.config.prm.model).max_context

    def hbm_slots(self) -> int:
        """Problems the FPGA board's HBM holds (:func:`fpga_slots`)."""
        return fpga_slots(self.config.fpga_power.name, self.config.draft_model.name,
                          self._prm_context())

    def powers(self) -> dict[str, DevicePower]:
        c = self.config
        return {"draft": c.draft(self.mode).power, "prm": c.prm_power, "target": c.target_power}

    @property
    def active_power_w(self) -> float:
        p = self.powers()
        return (self.drafts * p["draft"].active_w + self.prms * p["prm"].active_w
                + self.targets * p["target"].active_w)

    @property
    def devices(self) -> int:
        return self.drafts + self.prms + self.targets
