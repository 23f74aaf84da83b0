"""The artifact simulator's schedule, restated to compare this project's scheduler with it on
identical traces (the validation report's level a).

The paper's artifact prices each problem's trace analytically (the public repository
``zehuanzhang/HeteroReason``, ``Hardware/simulator/core.py``, semantics
``v12_rescue_serial_then_parallel``, the one its Config1 uses). Restated here from reading it,
in this project's terms, on the same execution traces (``execution_trace`` events as the
artifact stores them) and with the coefficients of a :class:`~heteroreason.model.system.
config.SystemConfig` (Config1's are the artifact's own), so that only the schedule differs:

* the latency starts with the draft's prompt prefill on a GPU and the prompt's KV crossing the
  link; contexts hold the chain alone (the prompt is not in them);
* the first step is drafted; then each event in turn, with the *window* (the time the previous
  event's last phase took, during which the target already generated for this one):

  accept
      the PRM verifies the step (and its tokens cross the link) while the next step is
      drafted: ``max(verify, next draft)``;
  rescue
      the verification, then the target's wait (its whole run, prefill of the context and
      decode, less ``window + verify``), then the PRM scores the target's step while the next
      step is drafted after it: ``verify + wait + max(score, next draft)``;
  backtrack
      (the event after a rescue, its target tokens the regenerated step) the steps after
      ``to_step`` are dropped from the contexts, then as a rescue: another verification (of the
      event's own draft tokens, none in the artifact's sets, at the context before the drop),
      the regeneration's wait against ``window + verify``, the score while the next step is
      drafted.

:class:`Alignment` switches move the restatement to this project's semantics one difference
at a time (the report measures each); with every switch off it is the artifact's schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from heteroreason.model.files import InputError, loads_json, read_text
from heteroreason.model.system.config import SystemConfig
from heteroreason.model.system.overlapped import PREFETCH_LIMIT_TOKENS
from heteroreason.model.timing.link import BYTES_PER_TOKEN_ID
from heteroreason.model.workload.trace_import import read_count
from heteroreason.model.workload.traces import ProblemTrace, StepOutcome, TraceError

__all__ = ["Alignment", "ArtifactEvent", "ArtifactProblem", "artifact_events",
           "artifact_latency_ms", "config_coefficients", "read_artifact_config",
           "read_artifact_problem"]

ACCEPT, RESCUE, BACKTRACK = "accept_pure_draft", "target_rescue", "BACKTRACK_EVENT"


@dataclass(frozen=True)
class ArtifactEvent:
    """One ``execution_trace`` event as the artifact's simulator reads it."""

    status: str
    logical_step: int
    draft_tokens: int
    target_tokens: int  # the rescue's or the regenerated step's (``target_total_tokens``)
    to_step: int | None = None  # a backtrack's last step kept


@dataclass(frozen=True)
class ArtifactProblem:
    """One problem of the artifact's execution traces: its set, its id, its prompt's tokens and
    its events in order."""

    dataset: str
    problem_id: str
    prompt_tokens: int
    events: tuple[ArtifactEvent, ...]


def read_artifact_problem(path: Path | str, *, dataset: str | None = None) -> ArtifactProblem:
    """One ``example_<N>.json`` of the artifact's ``with_bt`` sets."""
    path = Path(path)
    try:
        obj = loads_json(read_text(path), str(path))
    except InputError as exc:
        raise TraceError(exc.where, None, exc.reason) from None
    where = str(path)
    if not isinstance(obj, dict):
        raise TraceError(where, None, "an artifact trace must be a JSON object")
    raw = obj.get("execution_trace")
    if not isinstance(raw, list) or not raw:
        raise TraceError(where, "execution_trace", "must be a non-empty list", raw)
    events = []
    for i, e in enumerate(raw):
        ewhere = f"{where}: execution_trace[{i}]"
        if not isinstance(e, dict):
            raise TraceError(ewhere, None, "an event must be an object", e)
        status = e.get("status")
        if status not in (ACCEPT, RESCUE, BACKTRACK):
            raise TraceError(ewhere, "status", f"is not {ACCEPT}, {RESCUE} or {BACKTRACK}",
                             status)
        spent = read_count(e, "target_tokens_spent", ewhere, default=0)
        events.append(ArtifactEvent(
            status, read_count(e, "logical_step", ewhere, default=i),
            read_count(e, "draft_tokens_spent", ewhere),
            read_count(e, "target_total_tokens", ewhere, default=spent),
            read_count(e, "to_step", ewhere) if status == BACKTRACK else None))
    if "idx" not in obj:
        raise TraceError(where, "idx", "is required")
    return ArtifactProblem(dataset or path.parent.name, str(obj["idx"]),
                           read_count(obj, "prompt_tokens", where), tuple(events))


def artifact_events(trace: ProblemTrace) -> ArtifactProblem:
    """A trace of this project as the artifact's events: a backtrack is the failed rescue,
    then a ``BACKTRACK_EVENT`` with the regenerated step; logical steps are chain positions
    (from 1), ``to_step`` the last one kept."""
    events, chain = [], 0
    for step in trace.steps:
        chain += 1
        if step.outcome is StepOutcome.ACCEPT:
            events.append(ArtifactEvent(ACCEPT, chain, step.draft_tokens, 0))
            continue
        events.append(ArtifactEvent(RESCUE, chain, step.draft_tokens, step.target_tokens))
        if step.outcome is StepOutcome.BACKTRACK:
            chain -= 1 + step.backtrack_steps
            events.append(ArtifactEvent(BACKTRACK, chain + 1, 0, step.regenerated_tokens,
                                        to_step=chain))
            chain += 1 if step.regenerated_tokens else 0
    return ArtifactProblem(trace.dataset, trace.problem_id, trace.prompt_tokens, tuple(events))


def read_artifact_config(path: Path | str) -> tuple[str, dict[str, float]]:
    """The semantics and ``parameters_ms`` of one of the artifact simulator's configs."""
    path = Path(path)
    obj = loads_json(read_text(path), str(path))
    params = obj.get("parameters_ms") if isinstance(obj, dict) else None
    if not isinstance(params, dict):
        raise InputError(str(path), "field 'parameters_ms' must be an object")
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value < 0:
            raise InputError(str(path), f"parameters_ms.{key} must be a finite non-negative "
                                        f"number, not {value!r}")
    return str(obj.get("semantics", "")), dict(params)


def config_coefficients(config: SystemConfig) -> dict[str, float]:
    """``config``'s coefficients under the names of the artifact's ``parameters_ms`` (the
    FPGA draft, the PRM, the target, the link, the initial prefill and KV migration)."""
    fpga, prm, target, gpu = config.fpga, config.prm, config.target, config.draft_gpu
    return {
        "draft_alpha": fpga.decode_ms_per_token, "draft_beta": fpga.decode_ms_per_kv_token,
        "prm_alpha": prm.prefill_call_ms, "prm_beta": prm.prefill_ms_per_token,
        "target_pre_beta": target.prefill_ms_per_token,
        "target_alpha": target.decode_ms_per_token,
        "target_gen_beta": target.decode_ms_per_kv_token,
        "target_scale": 1.0,
        "bandwidth_gb_s": config.link.bandwidth_bytes_per_s / 1e9,
        "bytes_per_token": float(BYTES_PER_TOKEN_ID),
        "initial_gpu_prefill_ms": 0.0, "initial_kv_transfer_ms": 0.0,
        "draft_prefill_alpha": gpu.prefill_call_ms, "draft_prefill_beta": gpu.prefill_ms_per_token,
        "draft_kv_bytes_per_token": float(config.draft_model.kv_bytes_per_token(
            config.kv_bytes_per_element)),
    }


@dataclass(frozen=True)
class Alignment:
    """Differences of this project's scheduler from the artifact's schedule, each a switch
    that gives the restatement this project's semantics (all off: the artifact's).

    prompt_in_contexts
        The prompt counts in every context (the convention,
        :attr:`SystemConfig.prompt_in_contexts`).
    first_token_ingest
        After the KV migration the FPGA ingests the GPU's first token before it drafts.
    link_latency
        Every transfer pays the link's fixed latency.
    target_prefill_new_only
        The target prefills the tokens it has not cached (the artifact: the whole context
        on every call).
    prefetch_from_verdict
        The target starts a step when the step before it is accepted (the artifact: when that
        step's verification begins).
    regenerate_after_score
        A backtrack's regeneration starts when the failed target step's score is known, with
        no second verification (the artifact: the regeneration overlaps that score and the
        event is verified again).
    drop_by_position
        A backtrack keeps the chain's first ``to_step`` steps (the artifact: the steps
        labelled up to ``to_step``, a regenerated step labelled as the step before it, so that
        a later backtrack to just before that step keeps it; the artifact's sample traces never
        do so).
    regeneration_reuses_cache
        An accepted step's interrupted prefetch (what the target generated of it until the
        verdict, of at most ``PREFETCH_LIMIT_TOKENS``) is cached by chain position; a
        regeneration at that position reuses it at prefill cost (the artifact: decodes all).
    draft_ahead_of_score
        After a rescue, the next step, once drafted, waits for the PRM (still scoring the
        target's step) while the step after it is drafted already (the artifact: that draft
        begins with the next step's verification).
    shadow_ingest
        The FPGA ingests the target's tokens as they stream, from the verdict (a rescue) or
        the regeneration's start, at the FPGA model's ingest cost; the next step is drafted
        once they are in (the artifact: the draft resumes at the target's end, for free).
    """

    prompt_in_contexts: bool = False
    first_token_ingest: bool = False
    link_latency: bool = False
    target_prefill_new_only: bool = False
    prefetch_from_verdict: bool = False
    regenerate_after_score: bool = False
    drop_by_position: bool = False
    regeneration_reuses_cache: bool = False
    draft_ahead_of_score: bool = False
    shadow_ingest: bool = False

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(cls.__dataclass_fields__)


class _Costs:
    """The per-call prices of ``config`` as the artifact's simulator forms them."""

    def __init__(self, config: SystemConfig, align: Alignment):
        self.cfg, self.align = config, align

    def draft(self, kv: int, tokens: int) -> float:
        return self.cfg.fpga.decode_ms(tokens, kv)

    def verify(self, context: int, tokens: int) -> float:
        """The PRM's score of ``context`` tokens, after ``tokens`` crossed the link."""
        return self.cfg.prm.prefill_ms(context) + self.link(tokens)

    def link(self, tokens: int) -> float:
        ms = self.cfg.link.tokens_ms(tokens)
        return ms if self.align.link_latency or not ms else ms - self.cfg.link.latency_ms

    def target(self, kv: int, tokens: int, cached: int, reused: int = 0) -> float:
        """The target's run of ``tokens`` after a context of ``kv``, ``cached`` of which it
        holds already, the first ``reused`` of the tokens from its cache (at prefill cost)."""
        new = (kv - cached if self.align.target_prefill_new_only else kv) + reused
        t = self.cfg.target
        prefill = t.prefill_call_ms + t.prefill_ms_per_token * new if new else 0.0
        return prefill + t.decode_ms(tokens - reused, kv + reused)

    def prefetched(self, kv: int, cached: int, elapsed: float) -> int:
        """The tokens an accepted step's prefetch generated in ``elapsed`` ms (as this
        project's scheduler counts an interrupted run: its share of the run's tokens)."""
        run = self.target(kv, PREFETCH_LIMIT_TOKENS, cached)
        return PREFETCH_LIMIT_TOKENS if elapsed >= run else int(PREFETCH_LIMIT_TOKENS * elapsed
                                                                 / run)

    def ingest_tail(self, tokens: int, kv: int, target_left: float) -> float:
        """How long after the target's end the FPGA holds its ``tokens`` (after ``kv``), the
        ingest begun ``target_left`` before that end; it keeps pace with the stream, so at
        least one token's transfer and ingest."""
        if not tokens:
            return 0.0
        fpga = self.cfg.fpga
        busy = fpga.ingest_ms(tokens, kv)
        one = self.link(1) + fpga.ingest_ms(1, kv + tokens - 1)
        return max(one, busy - target_left)

    def initialization(self, prompt: int) -> float:
        if not prompt:
            return 0.0
        kv = self.cfg.link.kv_migration_ms(self.cfg.draft_model, prompt,
                                           bytes_per_element=self.cfg.kv_bytes_per_element)
        if not self.align.link_latency:
            kv -= self.cfg.link.latency_ms
        ms = self.cfg.draft_gpu.prefill_ms(prompt) + kv
        if self.align.first_token_ingest:
            context = prompt if self.align.prompt_in_contexts else 0
            ms += self.cfg.fpga.ingest_ms(1, context)
        return ms


def artifact_latency_ms(problem: ArtifactProblem, config: SystemConfig,
                        align: Alignment = Alignment()) -> float:
    """One problem's latency under the artifact's schedule (with ``align``'s switches)."""
    c = _Costs(config, align)
    events = problem.events
    kv = problem.prompt_tokens if align.prompt_in_contexts else 0  # the validated context
    draft_kv, target_kv = kv, 0
    kept: list[tuple[int, int]] = []  # (logical step, tokens) of the chain's steps
    cache: dict[int, int] = {}  # chain position -> the target's tokens of an accepted step
    latency = c.initialization(problem.prompt_tokens)
    window = c.draft(draft_kv, events[0].draft_tokens)
    latency += window
    head_start = 0.0  # of the next step-ahead draft, begun before the event's verification
    if align.prefetch_from_verdict:  # the target starts once it has prefilled the prompt
        window = latency - config.draft_gpu.prefill_ms(problem.prompt_tokens)
    draft_kv += events[0].draft_tokens
    for i, e in enumerate(events):
        following = events[i + 1].draft_tokens if i + 1 < len(events) else None
        verify = c.verify(kv + e.draft_tokens, e.draft_tokens)
        if e.status == ACCEPT:
            if align.regeneration_reuses_cache:
                cache[len(kept)] = c.prefetched(kv, target_kv, window + verify)
            target_kv = kv
            kv += e.draft_tokens
            kept.append((e.logical_step, e.draft_tokens))
            if following is None:
                latency += verify
                continue
            # the target's prefetch of the next step began with this verification (or at its
            # verdict, aligned): what remains of the window for it
            step = max(verify, c.draft(draft_kv, following) - head_start)
            window = step - verify if align.prefetch_from_verdict else step
            latency += step
            head_start = 0.0
            draft_kv += following
            continue
        if e.status == BACKTRACK:
            dropped = 0
            while kept and kept[-1][0] > e.to_step:
                dropped += kept.pop()[1]
            if dropped > kv:
                raise ValueError(f"problem {problem.problem_id}: a backtrack drops {dropped} "
                                 f"tokens of a context of {kv}")
            kv -= dropped
            draft_kv = kv
            target_kv = min(target_kv, kv)
            if align.regenerate_after_score:
                verify, window = 0.0, 0.0
        tokens = e.target_tokens
        reused = 0
        if e.status == BACKTRACK and align.regeneration_reuses_cache:
            reused = min(cache.pop(len(kept), 0), tokens)
        run = c.target(kv, tokens, target_kv, reused)
        target_kv = kv + tokens
        wait = max(0.0, run - (window + verify))
        score = c.verify(kv + tokens, tokens) if tokens else 0.0
        kv += tokens
        draft_kv = kv
        if e.status != BACKTRACK:
            kept.append((e.logical_step, tokens))
        else:
            kept.append((e.to_step + 1 if align.drop_by_position else e.to_step, tokens))
        latency += verify + wait
        if following is None:
            latency += score
            continue
        # from the target's end: the draft resumes once the step is ingested (unless the
        # step fails its score: the next event is its backtrack, and the ingest is dropped)
        fails = events[i + 1].status == BACKTRACK
        resume = c.ingest_tail(tokens, kv - tokens, wait) \
            if align.shadow_ingest and not fails else 0.0
        drafted = resume + c.draft(draft_kv, following)
        window = max(score, drafted)
        head_start = window - drafted if align.draft_ahead_of_score else 0.0
        latency += window
        draft_kv += following
    return latency
