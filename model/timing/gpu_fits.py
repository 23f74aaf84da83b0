"""The GPU presets' measured coefficients, as the fitter wrote them: a data file
(``model/timing/data/gpu_fits.json``) that ``heteroreason devices measured --write``
writes from the step profiles (:func:`~heteroreason.model.timing.measured_gpu.fit_roles`) and
the presets of :mod:`~heteroreason.model.timing.device_timing` read; no coefficient is typed
by hand. Each role's entry holds its call cost, its cost a token and a KV entry (in ms, four
significant digits, as the fitter rounds them) and its source (rows, errors, the KV term's
verdict)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from heteroreason.model.files import InputError, loads_json, read_text, write_text_atomic

__all__ = ["GPU_FITS_FILE", "GPU_FITS_FORMAT", "ROLES", "FittedRole", "load_gpu_fits",
           "write_gpu_fits"]

GPU_FITS_FILE = Path(__file__).parent / "data" / "gpu_fits.json"
GPU_FITS_FORMAT = "heteroreason-gpu-fits/1"
ROLES = ("draft", "prm", "target")
_FIELDS = ("call_ms", "ms_per_token", "ms_per_kv_token")


@dataclass(frozen=True)
class FittedRole:
    """A role's fitted coefficients (ms; the PRM's are a prefill's: a call and a token scored)
    and where they come from."""

    role: str
    call_ms: float
    ms_per_token: float
    ms_per_kv_token: float
    source: str


def write_gpu_fits(roles: Mapping[str, FittedRole], profiles: str, path: Path) -> Path:
    """Write ``roles`` (every one of :data:`ROLES`) as the fits of ``profiles``."""
    missing = [r for r in ROLES if r not in roles]
    if missing:
        raise ValueError(f"GPU fits lack the role(s) {', '.join(missing)}")
    obj = {"format": GPU_FITS_FORMAT, "profiles": profiles,
           "roles": {r: {f: getattr(roles[r], f) for f in (*_FIELDS, "source")}
                     for r in ROLES}}
    write_text_atomic(path, json.dumps(obj, indent=1) + "\n")
    return path


def load_gpu_fits(path: Path = GPU_FITS_FILE) -> dict[str, FittedRole]:
    """The fits in ``path``; a file that is not one names the field that is wrong."""
    where = str(path)
    obj = loads_json(read_text(path), where)
    if not isinstance(obj, dict) or obj.get("format") != GPU_FITS_FORMAT:
        raise InputError(where, f"not a GPU fits file (field 'format' must be "
                                f"{GPU_FITS_FORMAT!r})")
    roles = obj.get("roles")
    if not isinstance(roles, dict):
        raise InputError(where, "field 'roles' must be an object")
    out = {}
    for role in ROLES:
        entry = roles.get(role)
        if not isinstance(entry, dict):
            raise InputError(where, f"field 'roles.{role}' is missing")
        for f in _FIELDS:
            value = entry.get(f)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value < 0:
                raise InputError(where, f"field 'roles.{role}.{f}' must be a finite "
                                        f"non-negative number of ms, not {value!r}")
        if not isinstance(entry.get("source"), str) or not entry["source"]:
            raise InputError(where, f"field 'roles.{role}.source' must be a non-empty string")
        out[role] = FittedRole(role, *(float(entry[f]) for f in _FIELDS), entry["source"])
    return out
