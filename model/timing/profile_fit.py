"""Fit GPU timing coefficients from a per-step profile CSV in the artifact's format.

Each row is one reasoning step: the latency each model spent in it (``draft_latency_ms``,
``prm_latency_ms``, ``target_latency_ms``), its token counts and how many calls each model
made. Per component the fitted form is

* draft:  ``latency = call_ms * draft_calls + ms_per_token * draft_output_tokens``
* PRM:    ``latency = call_ms * prm_calls + ms_per_token * prm_input_tokens``
* target: ``latency = call_ms * target_calls + ms_per_token * target_output_tokens``

over rows where the component ran, dropping rows at or above ``max_latency_ms`` (warm-up,
pathological steps). The fit is robust (Huber loss by iteratively reweighted least squares,
scale from the median absolute deviation), since plain least squares is dragged by the heavy
tail; the plain fit is reported beside it, with the standard errors of its two coefficients
(``sigma^2 (X^T X)^-1``, ``sigma^2`` the residual variance over ``rows - 2``).

A component is fitted only where its two coefficients can be told apart: at least three rows
(one degree of freedom for the error) whose calls and tokens are not proportional. A profile in
which no component can be fitted raises :class:`ProfileError` with each component's reason.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heteroreason.model import checks
from heteroreason.model.files import InputError, read_text

__all__ = ["COMPONENTS", "CONTEXT_COLUMNS", "PROBLEM_COLUMN", "ComponentFit", "ProfileError",
           "fit_profile", "huber_fit", "read_profile", "unfitted_components"]

COMPONENTS = {
    "draft": ("draft_latency_ms", "draft_calls", "draft_output_tokens"),
    "prm": ("prm_latency_ms", "prm_calls", "prm_input_tokens"),
    "target": ("target_latency_ms", "target_calls", "target_output_tokens"),
}
REQUIRED = sorted({c for cols in COMPONENTS.values() for c in cols})
# the context of a decode call (its KV cache), read when the header has it: the fits with a KV
# term (:mod:`heteroreason.model.timing.measured_gpu`) need it
CONTEXT_COLUMNS = ("draft_input_tokens", "target_input_tokens")
# the problem a row belongs to, read when present (the validation sums a problem's rows)
PROBLEM_COLUMN = "example_idx"
# every column the artifact's step profiles have (AE_hardware/inputs/step_profile_csv/config2/
# *_step_profile.csv, their header): a header with any other is refused (a misspelt column is
# never silently ignored)
KNOWN_COLUMNS = frozenset({
    "dataset", "method", "run_tag", "example_idx", "problem_ordinal", "step", "phase",
    "draft_latency_ms", "prm_latency_ms", "target_latency_ms", "draft_input_tokens",
    "draft_output_tokens", "prm_input_tokens", "prm_output_rewards", "target_input_tokens",
    "target_output_tokens", "draft_calls", "prm_calls", "target_calls"})


class ProfileError(ValueError):
    """A profile CSV that cannot be used; names the file, line and column."""


@dataclass(frozen=True)
class ComponentFit:
    component: str
    call_ms: float
    ms_per_token: float
    rows: int
    dropped: int
    lstsq_call_ms: float
    lstsq_ms_per_token: float
    median_abs_pct_error: float
    mean_abs_error_ms: float
    call_ms_stderr: float = 0.0  # of the plain fit's coefficients
    ms_per_token_stderr: float = 0.0

    def row(self) -> list[str]:
        return [self.component, f"{self.call_ms:.2f}", f"{self.ms_per_token:.4f}",
                f"{self.lstsq_call_ms:.2f} ± {self.call_ms_stderr:.2f}",
                f"{self.lstsq_ms_per_token:.4f} ± {self.ms_per_token_stderr:.4f}", str(self.rows),
                str(self.dropped), f"{self.median_abs_pct_error:.1f}",
                f"{self.mean_abs_error_ms:.1f}"]

    COLUMNS = ("component", "call ms (robust)", "ms/token (robust)", "call ms (lstsq ± se)",
               "ms/token (lstsq ± se)", "rows", "dropped", "median |err| %", "mean |err| ms")


def read_profile(path: Path | str) -> dict[str, np.ndarray]:
    """The columns the fit needs, as float arrays; errors name file, line and column."""
    path = Path(path)
    try:
        text = read_text(path)
    except InputError as exc:
        raise ProfileError(str(exc)) from None
    # rows end at a newline or carriage return only (not at the other breaks of str.splitlines)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None:
        raise ProfileError(f"{path}: is empty (no header line)")
    missing = [c for c in REQUIRED if c not in reader.fieldnames]
    if missing:
        raise ProfileError(f"{path}: missing column(s) {', '.join(missing)}; "
                           f"the header has {', '.join(reader.fieldnames)}")
    unknown = [c for c in reader.fieldnames if c not in KNOWN_COLUMNS]
    if unknown:
        raise ProfileError(f"{path}: unknown column {unknown[0]!r}; a step profile's columns "
                           f"are {', '.join(sorted(KNOWN_COLUMNS))}")
    wanted = REQUIRED + [c for c in (*CONTEXT_COLUMNS, PROBLEM_COLUMN) if c in reader.fieldnames]
    columns: dict[str, list[float]] = {c: [] for c in wanted}
    for row in reader:
        line = reader.line_num
        if None in row:  # cells past the header's: not dropped without a word
            raise ProfileError(f"{path}:{line}: has {len(reader.fieldnames) + len(row[None])} "
                               f"fields, the header {len(reader.fieldnames)}")
        for c in wanted:
            cell = row.get(c)
            try:
                value = float(cell)
            except (TypeError, ValueError):
                raise ProfileError(f"{path}:{line}: column '{c}' must be a number, "
                                   f"not {cell!r}") from None
            if not np.isfinite(value) or value < 0:
                raise ProfileError(f"{path}:{line}: column '{c}' must be a finite "
                                   f"non-negative number, not {cell!r}")
            columns[c].append(value)
    if not columns[REQUIRED[0]]:
        raise ProfileError(f"{path}: has a header but no rows")
    return {c: np.asarray(v) for c, v in columns.items()}


def huber_fit(x: np.ndarray, y: np.ndarray, iterations: int = 50) -> np.ndarray:
    """The coefficients of ``y ~ x`` under a Huber loss (k = 1.345 MADs), by iteratively
    reweighted least squares from the plain fit."""
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    for _ in range(iterations):
        resid = y - x @ coef
        scale = 1.4826 * np.median(np.abs(resid - np.median(resid))) or 1.0
        k = 1.345 * scale
        weights = np.where(np.abs(resid) <= k, 1.0, k / np.maximum(np.abs(resid), 1e-12))
        w = np.sqrt(weights)
        new = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)[0]
        if np.allclose(new, coef, rtol=1e-9, atol=1e-9):
            return new
        coef = new
    return coef


def _identifiable(x: np.ndarray) -> str | None:
    """Why the two coefficients of ``x`` (calls, tokens) cannot be fitted, or None."""
    if len(x) < 3:
        return f"{len(x)} row(s) left, at least 3 needed"
    if np.linalg.matrix_rank(x) < 2:
        return "its calls and tokens are proportional in every row (collinear)"
    return None


def _components(columns: dict[str, np.ndarray], max_latency_ms: float):
    """Per component: its name, the rows it ran in, the rows kept, the fit's x and y, and why
    its coefficients cannot be fitted (None when they can)."""
    checks.number("max_latency_ms", max_latency_ms, low=0, low_open=True)
    for name, (lat, calls, tokens) in COMPONENTS.items():
        ran = columns[calls] > 0
        keep = ran & (columns[lat] < max_latency_ms)
        x = np.column_stack([columns[calls][keep], columns[tokens][keep]])
        y = columns[lat][keep]
        reason = "it never ran" if not ran.any() else _identifiable(x)
        yield name, ran, keep, x, y, reason


def unfitted_components(columns: dict[str, np.ndarray], *, max_latency_ms: float = 5000.0
                        ) -> dict[str, str]:
    """The components :func:`fit_profile` leaves out, each with the reason (a fit's table says
    them, rather than drop a component without a word)."""
    return {name: reason for name, *_, reason in _components(columns, max_latency_ms) if reason}


def fit_profile(columns: dict[str, np.ndarray], *, max_latency_ms: float = 5000.0
                ) -> list[ComponentFit]:
    """Fit every component whose coefficients the rows identify (the others, with their
    reasons: :func:`unfitted_components`); raises :class:`ProfileError` naming each
    component's reason when none can be fitted."""
    fits, reasons = [], []
    for name, ran, keep, x, y, reason in _components(columns, max_latency_ms):
        if reason:
            reasons.append(f"{name}: {reason}")
            continue
        robust = huber_fit(x, y)
        plain, rss = np.linalg.lstsq(x, y, rcond=None)[:2]
        sigma2 = float(rss[0]) / (len(y) - 2) if len(rss) else 0.0
        stderr = np.sqrt(np.diag(sigma2 * np.linalg.inv(x.T @ x)))
        pred = x @ robust
        fits.append(ComponentFit(
            component=name, call_ms=float(robust[0]), ms_per_token=float(robust[1]),
            rows=int(keep.sum()), dropped=int(ran.sum() - keep.sum()),
            lstsq_call_ms=float(plain[0]), lstsq_ms_per_token=float(plain[1]),
            median_abs_pct_error=float(100 * np.median(np.abs(pred - y) / np.maximum(y, 1e-9))),
            mean_abs_error_ms=float(np.mean(np.abs(pred - y))),
            call_ms_stderr=float(stderr[0]), ms_per_token_stderr=float(stderr[1])))
    if not fits:
        raise ProfileError("no component can be fitted: " + "; ".join(reasons))
    return fits
