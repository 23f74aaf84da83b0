"""The GPU models of the draft, the PRM and the target fitted from the artifact's measured step
profiles (``AE_hardware/inputs/step_profile_csv``, one CSV per dataset), cross-validated.

Per role the fitted form is the one the scheduler prices it with
(:class:`~heteroreason.model.timing.device_timing.LlmTiming`):

* draft and target (decode): ``latency = call_ms * calls + ms_per_token * out
  + ms_per_kv_token * kv``, with ``kv = out * context + out * (out + 1) / 2`` the KV entries the
  step's tokens attend to (``context`` the call's input tokens, as ``decode_ms`` counts them);
* PRM (a prefill-shaped scoring pass): ``latency = call_ms * calls + ms_per_token * input``.

Rows where the role did not run, or took ``max_latency_ms`` or more (warm-up), are left out.
Every fit is robust (Huber loss, :func:`~heteroreason.model.timing.profile_fit.huber_fit`).
The coefficients are fitted on all datasets' rows together; the cross-validation fits on each
dataset alone and reports the median absolute error on every other one. The KV term is kept
only where the data support it: a positive coefficient whose plain least-squares t-statistic
exceeds :data:`KV_T_MIN` and which lowers the cross-validated error in every direction;
otherwise the role is fitted without it (``ms_per_kv_token`` 0, the reason recorded).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from heteroreason.model import checks
from heteroreason.model.timing.gpu_fits import FittedRole
from heteroreason.model.timing.profile_fit import ProfileError, huber_fit

__all__ = ["KV_T_MIN", "ROLES", "CrossCheck", "RoleFit", "fit_roles", "significant"]

KV_T_MIN = 3.0

# role: (latency, calls, tokens, context column or None for a prefill-shaped role)
ROLES = {
    "draft": ("draft_latency_ms", "draft_calls", "draft_output_tokens", "draft_input_tokens"),
    "prm": ("prm_latency_ms", "prm_calls", "prm_input_tokens", None),
    "target": ("target_latency_ms", "target_calls", "target_output_tokens",
               "target_input_tokens"),
}


@dataclass(frozen=True)
class CrossCheck:
    """A fit on ``fitted_on`` alone, its median absolute error on ``tested_on``."""

    fitted_on: str
    tested_on: str
    median_abs_pct_error: float


@dataclass(frozen=True)
class RoleFit:
    """One role's coefficients (fitted on every dataset's rows), the rows per dataset, the
    in-sample and cross-validated errors and whether the KV term was kept (and why)."""

    role: str
    call_ms: float
    ms_per_token: float
    ms_per_kv_token: float
    rows: Mapping[str, int]
    median_abs_pct_error: float
    cross: tuple[CrossCheck, ...]
    kv_note: str

    @property
    def worst_cross_pct(self) -> float:
        return max(c.median_abs_pct_error for c in self.cross)

    def fitted(self, files: str) -> FittedRole:
        """The coefficients as a preset holds them (four significant digits) with their
        source: what :func:`~heteroreason.model.timing.gpu_fits.write_gpu_fits` stores."""
        return FittedRole(self.role, significant(self.call_ms), significant(self.ms_per_token),
                          significant(self.ms_per_kv_token), self.source(files))

    def source(self, files: str) -> str:
        """The coefficients' provenance, as a preset states it."""
        rows = " + ".join(f"{n} {name}" for name, n in self.rows.items())
        cross = ", ".join(f"{c.fitted_on}->{c.tested_on} {c.median_abs_pct_error:.1f} %"
                          for c in self.cross)
        return (f"Huber fit of {files} ({rows} rows; heteroreason devices measured): "
                f"median |error| {self.median_abs_pct_error:.1f} %, cross-validated {cross}; "
                f"KV term: {self.kv_note}")


def _design(columns, role: str, kv: bool, max_latency_ms: float, name: str):
    lat, calls, tokens, context = ROLES[role]
    keep = (columns[calls] > 0) & (columns[lat] < max_latency_ms)
    terms = [columns[calls], columns[tokens]]
    if kv:
        if context not in columns:
            raise ProfileError(f"{name}: the {role}'s KV term needs column '{context}', "
                               f"which the profile lacks")
        out = columns[tokens]
        terms.append(out * columns[context] + out * (out + 1) / 2)
    x, y = np.column_stack(terms)[keep], columns[lat][keep]
    if len(y) <= x.shape[1] or np.linalg.matrix_rank(x) < x.shape[1]:
        raise ProfileError(f"{name}: the {role}'s {x.shape[1]} coefficients cannot be told "
                           f"apart on its {len(y)} rows")
    return x, y


def _median_pct(x, y, coef) -> float:
    return float(100 * np.median(np.abs(x @ coef - y) / np.maximum(y, 1e-9)))


def _cross(profiles, role, kv, max_latency_ms) -> tuple[CrossCheck, ...]:
    out = []
    for a, cols_a in profiles.items():
        coef = huber_fit(*_design(cols_a, role, kv, max_latency_ms, a))
        for b, cols_b in profiles.items():
            if b != a:
                x, y = _design(cols_b, role, kv, max_latency_ms, b)
                out.append(CrossCheck(a, b, _median_pct(x, y, coef)))
    return tuple(out)


def _t_stat(x, y, k: int) -> float:
    coef, rss = np.linalg.lstsq(x, y, rcond=None)[:2]
    sigma2 = float(rss[0]) / (len(y) - x.shape[1]) if len(rss) else 0.0
    se = math.sqrt(sigma2 * np.linalg.inv(x.T @ x)[k, k])
    return float(coef[k] / se) if se > 0 else math.inf


def _fit_role(profiles, role, max_latency_ms) -> RoleFit:
    def pooled(kv):
        parts = [_design(c, role, kv, max_latency_ms, n) for n, c in profiles.items()]
        return np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    rows = {n: len(_design(c, role, False, max_latency_ms, n)[1]) for n, c in profiles.items()}
    x, y = pooled(False)
    coef = huber_fit(x, y)
    cross = _cross(profiles, role, False, max_latency_ms)
    kv_coef, note = 0.0, "not in a prefill-shaped form"
    if ROLES[role][3] is not None:
        xk, yk = pooled(True)
        coef_k = huber_fit(xk, yk)
        t = _t_stat(xk, yk, 2)
        cross_k = _cross(profiles, role, True, max_latency_ms)
        better = all(k.median_abs_pct_error < c.median_abs_pct_error
                     for k, c in zip(cross_k, cross, strict=True))
        if coef_k[2] > 0 and t > KV_T_MIN and better:
            x, y, coef, cross, kv_coef = xk, yk, coef_k, cross_k, float(coef_k[2])
            note = f"kept (t = {t:.1f}, lowers every cross-validated error)"
        else:
            note = (f"dropped (coefficient {coef_k[2]:.3g}, t = {t:.1f}; "
                    f"{'lowers' if better else 'does not lower'} every cross-validated error)")
    if min(coef[:2]) < 0:
        raise ProfileError(f"the {role}'s fit has a negative coefficient ({coef[:2]}): the "
                           f"profiles do not support its form")
    return RoleFit(role, float(coef[0]), float(coef[1]), kv_coef, rows,
                   _median_pct(x, y, coef), cross, note)


def fit_roles(profiles: Mapping[str, Mapping[str, np.ndarray]], *,
              max_latency_ms: float = 5000.0) -> dict[str, RoleFit]:
    """Every role fitted on ``profiles`` (dataset name -> the columns of
    :func:`~heteroreason.model.timing.profile_fit.read_profile`), at least two datasets so that
    each fit is cross-validated; the datasets are taken in the order of their names."""
    if len(profiles) < 2:
        raise ProfileError(f"a cross-validated fit needs profiles of at least two datasets, "
                           f"not {len(profiles)}")
    checks.number("max_latency_ms", max_latency_ms, low=0, low_open=True)
    ordered = {name: profiles[name] for name in sorted(profiles)}  # one order, one result
    return {role: _fit_role(ordered, role, max_latency_ms) for role in ROLES}


def significant(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits (how the presets state a fit)."""
    if value == 0:
        return 0.0
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))
