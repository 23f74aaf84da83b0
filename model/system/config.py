"""System configurations (hardware apart from workloads) and scheduler modes (docs/design.md §6)."""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace

from heteroreason.model import checks
from heteroreason.model.files import LoadedOnUse
from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config, qwen2_config
from heteroreason.model.timing.device_timing import LlmTiming, timing
from heteroreason.model.timing.energy import DevicePower, power
from heteroreason.model.timing.fpga.platform import (
    BOARDS,
    ENGINE_CONTEXTS,
    board_power,
    draft_timing,
)
from heteroreason.model.timing.link import LinkConfig, link

__all__ = ["CONFIGS", "FPGA_MODELS", "GPU_DRAFTS", "DraftSide", "ServingMode", "SystemConfig",
           "system_config"]


class ServingMode(enum.Enum):
    """Scheduler modes.

    ``rsd``: sequential, no backtracking, the target's step is not scored.
    ``baseline``: BRSD on three GPUs, sequential.
    ``t2``: baseline plus step-ahead speculation and refinement (target prefetch, partial-output
    cache), GPUs only.
    ``heteroreason``: ``t2`` with the draft on the FPGA (KV migration, KVMU rollback, shadow
    synchronisation over PCIe).
    """

    RSD = "rsd"
    BASELINE = "baseline"
    T2 = "t2"
    HETEROREASON = "heteroreason"

    @classmethod
    def parse(cls, name: str) -> ServingMode:
        return checks.member(cls, name, what="mode")

    @property
    def overlapped(self) -> bool:
        return self in (ServingMode.T2, ServingMode.HETEROREASON)

    @property
    def on_fpga(self) -> bool:
        return self is ServingMode.HETEROREASON

    @property
    def backtracking(self) -> bool:
        return self is not ServingMode.RSD


@dataclass(frozen=True)
class DraftSide:
    """Where a mode drafts (the FPGA board or a GPU) and what follows: the draft's timing, its
    device's power, the model it runs and the system's measured busy-average power."""

    on_fpga: bool
    timing: LlmTiming
    power: DevicePower
    model: Qwen2Config
    system_w: float


@dataclass(frozen=True)
class SystemConfig:
    """The machine: the three models' timing, the FPGA draft, the link, device power.

    ``prompt_in_contexts``: the prompt counts in every model's context (the PRM scores it, the
    draft and the target attend to it), as the machine runs. ``False`` is the artifact
    simulator's convention (contexts hold the reasoning chain alone; the prompt costs only the
    initial prefill and KV migration), for comparisons on its terms (the validation report's
    level a).
    """

    name: str
    draft_gpu: LlmTiming
    prm: LlmTiming
    target: LlmTiming
    fpga: LlmTiming
    link: LinkConfig
    draft_model: Qwen2Config
    draft_gpu_power: DevicePower
    prm_power: DevicePower
    target_power: DevicePower
    fpga_power: DevicePower
    three_gpu_system_w: float
    fpga_system_w: float
    kv_bytes_per_element: float = 2.0
    prompt_in_contexts: bool = True
    # problems the FPGA draft engine holds at once by design (None: as many as the board's HBM
    # holds at the PRM's context limit: the artifact simulator's board, the paper's claim)
    fpga_contexts: int | None = None

    def draft(self, mode: ServingMode) -> DraftSide:
        """Where ``mode`` drafts, and what follows from it: the one place that decides."""
        if mode.on_fpga:
            return DraftSide(True, self.fpga, self.fpga_power, self.draft_model,
                             self.fpga_system_w)
        return DraftSide(False, self.draft_gpu, self.draft_gpu_power,
                         qwen2_config(self.draft_gpu.model), self.three_gpu_system_w)

    def with_fpga(self, fpga: LlmTiming, fpga_power: DevicePower | None = None, *,
                  contexts: int | None = None) -> SystemConfig:
        """The configuration with another FPGA draft (and its board's power, and the problems
        its engine holds: ``contexts``, None for as many as the HBM holds). The measured
        HeteroReason system power follows the board: the artifact's figure with the old board's
        power swapped for the new one's."""
        if contexts is not None:
            checks.integer("fpga contexts", contexts, low=1, note="or None")
        if fpga_power is None:
            return replace(self, fpga=fpga, fpga_contexts=contexts)
        system_w = self.fpga_system_w - self.fpga_power.active_w + fpga_power.active_w
        return replace(self, fpga=fpga, fpga_power=fpga_power, fpga_system_w=system_w,
                       fpga_contexts=contexts)


def _fpga_draft(board: str, preset: str | None = None, *,
                ingest_batch: int = 1) -> tuple[LlmTiming, DevicePower, int | None]:
    """The board's draft timing (the artifact's preset, or the RTL-calibrated model, its ingest
    in passes of ``ingest_batch``), its power and the problems it holds at once (the artifact's
    board: as many as its HBM holds; this project's: one for a design of one token a pass,
    else its MultiDraftEngine's :data:`~heteroreason.model.timing.fpga.platform.
    ENGINE_CONTEXTS`)."""
    if preset:
        return timing(preset), board_power(board), None
    contexts = 1 if ingest_batch == 1 else ENGINE_CONTEXTS
    return draft_timing(board, ingest_batch=ingest_batch), board_power(board), contexts


# the FPGA draft models a configuration can run with, named ``<source>-<board>`` (``fpga/`` and
# the name is the timing preset): the artifact simulator's coefficients, or the RTL-calibrated
# timing of this project's decoder on a board (:data:`~heteroreason.model.timing.fpga.platform.
# BOARDS`: ``u280-200``, ``u280-300``, ``v80``); ``-batch4``: the design built with a batched
# ingest of four tokens a pass (where it fits the board)
FPGA_MODELS = {
    "artifact": None,  # the configuration's own: the artifact simulator's U280 coefficients
    "artifact-v80": functools.partial(_fpga_draft, "v80", "fpga/artifact-v80"),
    **{f"rtl-{board}": functools.partial(_fpga_draft, board) for board in BOARDS},
    **{f"rtl-{board}-batch4": functools.partial(_fpga_draft, board, ingest_batch=4)
       for board in ("u280-300", "v80")},
}
# drafts a pass of each FPGA model's design (its ``ingest_batch``): four for the designs built
# for a pass of four, whose MultiDraftEngine drafts for up to four of its problems a pass
FPGA_PER_PASS = {name: 4 for name in FPGA_MODELS if name.endswith("-batch4")}


def design_per_pass(fpga: str | None) -> int:
    """Drafts a pass of the FPGA model ``fpga``'s design (one where it is not built for more,
    and for the artifact's board)."""
    return FPGA_PER_PASS.get(fpga or "", 1)


# the artifact's U280 ran at 300 MHz
ARTIFACT_BOARD = "u280-300"

DRAFT_MODEL = qwen2_config("qwen2.5-0.5b")

# the GPU draft models a configuration can run with: the one fitted on the measured step
# profiles (the configuration's own, the default), the paper's claimed 125 tok/s, and the same
# 0.5B model on stacks deployed today, from published measurements (each preset's source)
GPU_DRAFTS = {"measured": None, "paper": "gpu/draft-paper", "vllm-a100": "gpu/draft-vllm-a100",
              "hf-a100": "gpu/draft-hf-a100"}

# the last two figures of each: the busy-average system power the artifact measured with three
# GPUs and with the FPGA and two GPUs (power_smoke_results.json)
def _configs() -> dict[str, SystemConfig]:
    return {
        "config1": SystemConfig(
            "config1", timing("config1/draft"), timing("config1/prm"), timing("config1/target"),
            timing("fpga/artifact-u280"), link("pcie3-x16"), DRAFT_MODEL,
            power("rtx3090-0.5b"), power("rtx3090-7b"), power("rtx3090-7b"),
            board_power(ARTIFACT_BOARD), 551.19, 488.42),
        "config2": SystemConfig(
            "config2", timing("config2/draft"), timing("config2/prm"), timing("config2/target"),
            timing("fpga/artifact-u280-config2"), link("pcie3-x16"), DRAFT_MODEL,
            power("rtx3090-0.5b"), power("rtx3090-7b"), power("rtx3090-1.5b"),
            board_power(ARTIFACT_BOARD), 506.55, 438.09),
    }


# built on first use (the presets read their data file then, not at import)
CONFIGS: Mapping[str, SystemConfig] = LoadedOnUse(_configs)


def system_config(name: str, *, fpga: str | None = None,
                  gpu_draft: str = "measured") -> SystemConfig:
    """A configuration by name, optionally with another FPGA draft model (:data:`FPGA_MODELS`)
    or GPU draft model (:data:`GPU_DRAFTS`)."""
    if name not in CONFIGS:
        raise ValueError(f"unknown config {name!r}; choose one of {', '.join(CONFIGS)}")
    if gpu_draft not in GPU_DRAFTS:
        raise ValueError(f"unknown GPU draft model {gpu_draft!r}; choose one of "
                         f"{', '.join(GPU_DRAFTS)}")
    config = CONFIGS[name]
    if GPU_DRAFTS[gpu_draft] is not None:
        config = replace(config, draft_gpu=timing(GPU_DRAFTS[gpu_draft]))
    if fpga is not None:
        if fpga not in FPGA_MODELS:
            raise ValueError(f"unknown FPGA model {fpga!r}; choose one of "
                             f"{', '.join(FPGA_MODELS)}")
        if FPGA_MODELS[fpga] is not None:
            draft, board_w, contexts = FPGA_MODELS[fpga]()
            config = config.with_fpga(draft, board_w, contexts=contexts)
    return config
