#!/usr/bin/env python3
"""GPU, FPGA, link and power models: list the presets, fit a step profile, check rooflines.

    heteroreason devices presets
    heteroreason devices fit PROFILE.csv [--max-latency-ms 5000]
    heteroreason devices measured [PROFILE.csv ...]   # the GPU presets' fits
    heteroreason devices roofline [--context 512]

Bad input exits with status 2 and a message naming the file, line and column.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from heteroreason.commands.common import command_parser
from heteroreason.model.experiments.report import format_table
from heteroreason.model.files import output_problem
from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.device_timing import MEASURED_PROFILES, PRESETS
from heteroreason.model.timing.energy import DEVICE_POWER
from heteroreason.model.timing.gpu import GPUS, roofline_check
from heteroreason.model.timing.gpu_fits import GPU_FITS_FILE, write_gpu_fits
from heteroreason.model.timing.link import LINKS
from heteroreason.model.timing.measured_gpu import fit_roles, significant
from heteroreason.model.timing.profile_fit import (
    ComponentFit,
    ProfileError,
    fit_profile,
    read_profile,
    unfitted_components,
)


def cmd_presets(args) -> int:
    rows = [[t.name, t.model, t.device, t.decode_call_ms, t.decode_ms_per_token,
             t.decode_ms_per_kv_token, t.prefill_call_ms, t.prefill_ms_per_token]
            for t in PRESETS.values()]
    print(format_table(["timing", "model", "device", "decode call ms", "ms/token", "ms/token/kv",
                  "prefill call ms", "prefill ms/token"], rows))
    print()
    print(format_table(["link", "GB/s", "latency ms"],
                 [[c.name, c.bandwidth_bytes_per_s / 1e9, c.latency_ms]
                  for c in LINKS.values()]))
    print()
    print(format_table(["power", "active W", "idle W", "source"],
                 [[p.name, p.active_w, p.idle_w, p.source] for p in DEVICE_POWER.values()]))
    return 0


def cmd_fit(args) -> int:
    for path in args.files:
        try:
            columns = read_profile(path)
            fits = fit_profile(columns, max_latency_ms=args.max_latency_ms)
            unfitted = unfitted_components(columns, max_latency_ms=args.max_latency_ms)
        except ProfileError as exc:
            message = str(exc)
            raise ProfileError(message if message.startswith(str(path)) else
                               f"{path}: {message}") from None
        print(f"{path} (rows at or above {args.max_latency_ms:g} ms dropped)")
        print(format_table(ComponentFit.COLUMNS, [f.row() for f in fits]))
        for name, reason in unfitted.items():  # said, not dropped from the table unseen
            print(f"  {name}: not fitted ({reason})")
    return 0


# where the artifact keeps its step profiles, relative to its root
PROFILE_FOLDER = Path("AE_hardware/inputs/step_profile_csv/config2")
DEFAULT_ARTIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / \
    "heteroreason-artifact"


def _dataset(path: Path) -> str:
    """The dataset a profile is of (the artifact names it in the file name)."""
    for name in ("math500", "gsm8k", "aime", "olympiad"):
        if name in path.name.lower():
            return name
    return path.stem


def cmd_measured(args) -> int:
    problem = args.write is not None and output_problem(args.write, folder=False)
    if problem:
        raise ProfileError(f"--write: {problem}")
    files = args.files or sorted((DEFAULT_ARTIFACT / PROFILE_FOLDER).glob("*.csv"))
    if not files:
        raise ProfileError(f"no profiles given and none at {DEFAULT_ARTIFACT / PROFILE_FOLDER}")
    profiles = {}
    for path in files:
        name = _dataset(path)
        if name in profiles:
            raise ProfileError(f"{path}: a second profile of dataset {name}")
        profiles[name] = read_profile(path)
    fits = fit_roles(profiles, max_latency_ms=args.max_latency_ms)
    rows = []
    for role, f in fits.items():
        cross = "; ".join(f"{c.fitted_on}->{c.tested_on} {c.median_abs_pct_error:.1f}"
                          for c in f.cross)
        rows.append([role, significant(f.call_ms), significant(f.ms_per_token),
                     significant(f.ms_per_kv_token),
                     " + ".join(str(n) for n in f.rows.values()),
                     f"{f.median_abs_pct_error:.1f}", cross, f.kv_note])
    print(f"{', '.join(map(str, files))} (rows at or above {args.max_latency_ms:g} ms dropped)")
    print(format_table(["role", "call ms", "ms/token", "ms/kv token", "rows",
                        "median |err| %", "cross-validated median |err| %", "KV term"], rows))
    print()
    print("each preset's source, as device_timing states it:")
    for role, f in fits.items():
        print(f"  {role}: {f.source(MEASURED_PROFILES)}")
    if args.write is not None:
        fitted = {role: f.fitted(MEASURED_PROFILES) for role, f in fits.items()}
        print(f"wrote {write_gpu_fits(fitted, MEASURED_PROFILES, args.write)}")
    return 0


def cmd_roofline(args) -> int:
    rows = []
    for t in PRESETS.values():
        if t.device not in GPUS:
            continue
        model = qwen2_config(t.model)
        for check in roofline_check(t, model, GPUS[t.device], context=args.context):
            rows.append([t.name, check.what, f"{check.measured_ms:.4f}", f"{check.bound_ms:.4f}",
                         f"{check.ratio:.2f}"])
    print(format_table(["timing", "quantity", "measured ms", "roofline ms", "measured/roofline"],
                 rows))
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("presets", help="list the timing, link and power presets")
    f = sub.add_parser("fit", help="fit GPU coefficients from per-step profile CSVs")
    f.add_argument("files", nargs="+", type=Path)
    f.add_argument("--max-latency-ms", type=float, default=5000.0,
                   help="profile rows slower than this are dropped as outliers")
    me = sub.add_parser("measured", help="the GPU presets' fits, cross-validated between "
                                        "the datasets' profiles")
    me.add_argument("files", nargs="*", type=Path,
                    help="profiles, one per dataset (default: the artifact's Config2 ones "
                         "in ../shared)")
    me.add_argument("--max-latency-ms", type=float, default=5000.0,
                    help="profile rows slower than this are dropped as outliers")
    me.add_argument("--write", nargs="?", type=Path, const=GPU_FITS_FILE, metavar="PATH",
                    help="write the fits as the presets' coefficients (default "
                         "model/timing/data/gpu_fits.json)")
    r = sub.add_parser("roofline", help="measured coefficients against the GPU roofline")
    r.add_argument("--context", type=int, default=512,
                   help="the context length (tokens) of the roofline's comparison")
    args = parser.parse_args(argv)
    limit = getattr(args, "max_latency_ms", 1.0)
    if not math.isfinite(limit) or limit <= 0:
        parser.error(f"--max-latency-ms must be a finite positive number, not {limit}")
    if getattr(args, "context", 0) < 0:
        parser.error(f"--context must be a non-negative integer, not {args.context}")
    handler = {"presets": cmd_presets, "fit": cmd_fit, "measured": cmd_measured,
               "roofline": cmd_roofline}[args.command]
    try:
        return handler(args)
    except ProfileError as exc:
        print(f"heteroreason devices: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
