#!/usr/bin/env python3
"""GPU, FPGA, link and power models: list the presets, fit a step profile, check rooflines.

    python scripts/device_models.py presets
    python scripts/device_models.py fit PROFILE.csv [--max-latency-ms 5000]
    python scripts/device_models.py roofline [--context 512]

Bad input exits with status 2 and a message naming the file, line and column.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from heteroreason.model.experiments.report import format_table
from heteroreason.model.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.device_timing import PRESETS
from heteroreason.model.timing.energy import DEVICE_POWER
from heteroreason.model.timing.gpu import GPUS, roofline_check
from heteroreason.model.timing.link import LINKS
from heteroreason.model.timing.profile_fit import (
    ComponentFit,
    ProfileError,
    fit_profile,
    read_profile,
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
            fits = fit_profile(read_profile(path), max_latency_ms=args.max_latency_ms)
        except ProfileError as exc:
            message = str(exc)
            raise ProfileError(message if message.startswith(str(path)) else
                               f"{path}: {message}") from None
        print(f"{path} (rows at or above {args.max_latency_ms:g} ms dropped)")
        print(format_table(ComponentFit.COLUMNS, [f.row() for f in fits]))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("presets", help="list the timing, link and power presets")
    f = sub.add_parser("fit", help="fit GPU coefficients from per-step profile CSVs")
    f.add_argument("files", nargs="+", type=Path)
    f.add_argument("--max-latency-ms", type=float, default=5000.0)
    r = sub.add_parser("roofline", help="measured coefficients against the GPU roofline")
    r.add_argument("--context", type=int, default=512)
    args = parser.parse_args(argv)
    limit = getattr(args, "max_latency_ms", 1.0)
    if not math.isfinite(limit) or limit <= 0:
        parser.error(f"--max-latency-ms must be a finite positive number, not {limit}")
    if getattr(args, "context", 0) < 0:
        parser.error(f"--context must be a non-negative integer, not {args.context}")
    handler = {"presets": cmd_presets, "fit": cmd_fit, "roofline": cmd_roofline}[args.command]
    try:
        return handler(args)
    except ProfileError as exc:
        print(f"device_models: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
