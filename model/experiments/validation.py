"""The system model against measurement (the validation report's level b): per problem, the
latency the models give against the latency the artifact measured.

* **Step profiles** (``AE_hardware/inputs/step_profile_csv``): each step's draft, PRM and target
  latencies were measured; a problem's measured latency is the sum over its rows, its modelled
  one the same sum of the GPU presets' forms
  (:class:`~heteroreason.model.timing.device_timing.LlmTiming`) on the rows' own calls and
  tokens — with the presets (fitted on every dataset) and cross-validated (refitted on the
  other datasets alone, :mod:`~heteroreason.model.timing.measured_gpu`). Every problem counts,
  its stalled rows too (a PRM call of 30 s on 88 tokens: the machine did something else); the
  summary is the median of the per-problem errors, which such problems do not move.
* **Token logs** (``AE_hardware/inputs/token_logs``): each record's wall-clock ``latency``
  against the scheduler's ``baseline`` replay of the record imported as a trace.

Level a (:func:`schedule_checks`): the scheduler's ``heteroreason`` replay against the
artifact simulator's schedule (:mod:`~heteroreason.model.experiments.artifact_semantics`) on
the same execution traces and coefficients, with the prompt convention aligned, then with each
remaining difference switched to this project's semantics in turn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from heteroreason.model.experiments.artifact_semantics import (
    Alignment,
    artifact_latency_ms,
    read_artifact_problem,
)
from heteroreason.model.files import loads_json, read_text
from heteroreason.model.system.config import SystemConfig
from heteroreason.model.system.records import ProblemRun
from heteroreason.model.system.simulate import simulate
from heteroreason.model.timing.device_timing import LlmTiming
from heteroreason.model.timing.measured_gpu import ROLES, RoleFit, fit_roles
from heteroreason.model.timing.profile_fit import PROBLEM_COLUMN, ProfileError
from heteroreason.model.workload.trace_import import import_artifact_file, import_token_log

__all__ = ["ALIGNMENT_ORDER", "ProblemCheck", "ScheduleCheck", "implied_draft_ms_per_token",
           "median_abs_pct", "profile_checks", "schedule_checks", "token_log_checks",
           "token_log_replay"]


@dataclass(frozen=True)
class ProblemCheck:
    """One problem: measured and modelled latency (ms); ``cross_ms`` is the cross-validated
    model's where there is one."""

    source: str
    problem: str
    steps: int
    measured_ms: float
    model_ms: float
    cross_ms: float | None = None

    @property
    def error(self) -> float:
        return (self.model_ms - self.measured_ms) / self.measured_ms

    @property
    def cross_error(self) -> float | None:
        if self.cross_ms is None:
            return None
        return (self.cross_ms - self.measured_ms) / self.measured_ms


def median_abs_pct(errors) -> float:
    """The median of ``|errors|``, in per cent."""
    values = [abs(e) for e in errors if e is not None]
    if not values:
        raise ValueError("no errors to summarize")
    return float(100 * np.median(values))


Coefficients = tuple[float, float, float]  # call ms, ms per token, ms per KV entry


def _preset_coefficients(t: LlmTiming, role: str) -> Coefficients:
    if ROLES[role][3] is None:  # prefill-shaped
        return (t.prefill_call_ms, t.prefill_ms_per_token, 0.0)
    return (t.decode_call_ms, t.decode_ms_per_token, t.decode_ms_per_kv_token)


def _fit_coefficients(f: RoleFit) -> Coefficients:
    return (f.call_ms, f.ms_per_token, f.ms_per_kv_token)


def _row_ms(columns, role: str, c: Coefficients) -> np.ndarray:
    _, calls, tokens, context = ROLES[role]
    out = columns[tokens]
    kv = out * columns[context] + out * (out + 1) / 2 if context else 0.0
    return c[0] * columns[calls] + c[1] * out + c[2] * kv


def profile_checks(profiles: Mapping[str, Mapping[str, np.ndarray]],
                   presets: Mapping[str, LlmTiming], *, max_latency_ms: float = 5000.0
                   ) -> list[ProblemCheck]:
    """Every problem of every profile (dataset name -> columns with ``example_idx``), modelled
    with ``presets`` (role -> timing) and cross-validated (the refits leave out rows at or
    above ``max_latency_ms``, as the presets' fits do)."""
    missing = [name for name, cols in profiles.items() if PROBLEM_COLUMN not in cols]
    if missing:
        raise ProfileError(f"{', '.join(missing)}: no '{PROBLEM_COLUMN}' column: the rows "
                           f"cannot be summed per problem")
    checks = []
    for name, cols in sorted(profiles.items()):
        others = {n: c for n, c in profiles.items() if n != name}
        # the cross-validated model: fitted on the other datasets alone (with one other, a
        # single fit: its own cross-validation is not needed here, so the folds are pooled)
        cross = _fit_on(others, max_latency_ms) if others else None
        measured = sum(cols[ROLES[r][0]] for r in ROLES)
        model = sum(_row_ms(cols, r, _preset_coefficients(presets[r], r)) for r in ROLES)
        cross_ms = (sum(_row_ms(cols, r, _fit_coefficients(cross[r])) for r in ROLES)
                    if cross else None)
        ids = cols[PROBLEM_COLUMN]
        for problem in sorted(set(ids.tolist())):
            rows = ids == problem
            checks.append(ProblemCheck(
                name, str(int(problem)), int(rows.sum()), float(measured[rows].sum()),
                float(model[rows].sum()),
                float(cross_ms[rows].sum()) if cross_ms is not None else None))
    return checks


def _fit_on(profiles, max_latency_ms) -> dict[str, RoleFit]:
    if len(profiles) >= 2:
        return fit_roles(profiles, max_latency_ms=max_latency_ms)
    # one dataset: its rows split in two halves by problem, so that fit_roles can run (the
    # coefficients are those of the pooled rows, which are all this dataset's)
    (name, cols), = profiles.items()
    ids = cols[PROBLEM_COLUMN]
    half = ids < np.median(ids)
    return fit_roles({f"{name}/a": {k: v[half] for k, v in cols.items()},
                      f"{name}/b": {k: v[~half] for k, v in cols.items()}},
                     max_latency_ms=max_latency_ms)


def token_log_replay(path: Path | str, config: SystemConfig, *, dataset: str,
                     prompt_tokens: int) -> tuple[list[ProblemCheck], list[ProblemRun]]:
    """Every record of a token log: its measured ``latency`` (s) against ``baseline`` on
    ``config``, and the replay of each record (in the same order) that priced it."""
    traces, _ = import_token_log(path, dataset=dataset, prompt_tokens=prompt_tokens)
    measured = {}
    for number, line in enumerate(read_text(Path(path)).splitlines(), 1):
        if line.strip():
            record = loads_json(line, f"{path}:{number}")  # a record import_token_log read
            latency = record.get("latency")
            if isinstance(latency, bool) or not isinstance(latency, int | float) or \
                    not 0 < latency < math.inf:
                raise ProfileError(f"{path}:{number}: field 'latency' must be a positive "
                                   f"number of seconds, not {latency!r}")
            measured[str(record["idx"])] = 1000.0 * latency
    runs = list(simulate(traces, config, "baseline").runs)
    checks = [ProblemCheck(Path(path).name, run.trace.problem_id, len(run.trace.steps),
                           measured[run.trace.problem_id], run.latency_ms) for run in runs]
    return checks, runs


def token_log_checks(path: Path | str, config: SystemConfig, *, dataset: str,
                     prompt_tokens: int) -> list[ProblemCheck]:
    """Every record of a token log: its measured ``latency`` (s) against ``baseline`` on
    ``config``."""
    return token_log_replay(path, config, dataset=dataset, prompt_tokens=prompt_tokens)[0]


def implied_draft_ms_per_token(check: ProblemCheck, config: SystemConfig, run: ProblemRun
                               ) -> float:
    """The draft's ms per token that would make ``baseline`` match ``check``'s measured
    latency, every other job (the PRM's, the target's, the prompt's prefill, the draft's
    per-call cost) as the models price it: the measured latency less all the non-draft time of
    ``run`` (the record's ``baseline`` replay on ``config``) and the draft's calls, over the
    draft's tokens. ``baseline`` is sequential, so the replay's latency is the sum of its
    jobs."""
    if run.trace.problem_id != check.problem:
        raise ValueError(f"the replay is of problem {run.trace.problem_id}, the check of "
                         f"{check.problem}")
    drafts = [iv for iv in run.intervals if iv.kind == "draft" and not iv.wasted]
    tokens = sum(iv.tokens for iv in drafts)
    if not tokens:
        raise ValueError(f"problem {check.problem}: no draft tokens")
    other = run.latency_ms - sum(iv.duration_ms for iv in drafts)
    calls = len(drafts) * config.draft_gpu.decode_call_ms
    return (check.measured_ms - other - calls) / tokens


# the differences of this project's scheduler from the artifact's schedule, in the order the
# report aligns them (the prompt's convention first: the scheduler follows it with
# SystemConfig.prompt_in_contexts)
ALIGNMENT_ORDER = tuple(n for n in Alignment.names() if n != "prompt_in_contexts")


@dataclass(frozen=True)
class ScheduleCheck:
    """One problem on identical traces and coefficients (ms): the artifact's schedule
    (``artifact_ms``, its conventions), this project's ``heteroreason`` replay with the
    artifact's prompt convention (``ours_ms``) and with its own (``ours_prompt_ms``, against
    ``artifact_prompt_ms``: the artifact's schedule with the prompt in the contexts); ``ladder_ms``:
    the artifact's schedule with the differences of :data:`ALIGNMENT_ORDER` switched to this
    project's semantics cumulatively, ``alone_ms`` each alone."""

    dataset: str
    problem: str
    events: int
    artifact_ms: float
    ours_ms: float
    artifact_prompt_ms: float
    ours_prompt_ms: float
    ladder_ms: tuple[float, ...]
    alone_ms: tuple[float, ...]

    @property
    def difference(self) -> float:
        """Ours against the artifact's schedule, conventions aligned."""
        return (self.ours_ms - self.artifact_ms) / self.artifact_ms

    def ladder_differences(self) -> tuple[float, ...]:
        return tuple((self.ours_ms - a) / a for a in self.ladder_ms)


def schedule_checks(files, config: SystemConfig) -> list[ScheduleCheck]:
    """Every artifact execution trace in ``files`` (``example_<N>.json``, the dataset its
    folder) on ``config``: see :class:`ScheduleCheck`."""
    chain_only = replace(config, prompt_in_contexts=False)
    checks = []
    for path in files:
        problem = read_artifact_problem(path)
        trace = import_artifact_file(path)
        ours = simulate([trace], chain_only, "heteroreason").runs[0].latency_ms
        ours_prompt = simulate([trace], config, "heteroreason").runs[0].latency_ms
        ladder, alone = [], []
        for k, name in enumerate(ALIGNMENT_ORDER):
            ladder.append(artifact_latency_ms(problem, config, Alignment(
                **dict.fromkeys(ALIGNMENT_ORDER[:k + 1], True))))
            alone.append(artifact_latency_ms(problem, config, Alignment(**{name: True})))
        checks.append(ScheduleCheck(
            problem.dataset, problem.problem_id, len(problem.events),
            artifact_latency_ms(problem, config), ours,
            artifact_latency_ms(problem, config, Alignment(prompt_in_contexts=True)),
            ours_prompt, tuple(ladder), tuple(alone)))
    return checks
