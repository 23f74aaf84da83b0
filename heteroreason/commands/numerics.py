#!/usr/bin/env python3
"""Draft-model numerics: op/byte counts, W8A8 quality against the float model, decode speed.

    heteroreason numerics                 # counts and test-preset quality
    heteroreason numerics --full-layer    # + one full-size Qwen2.5-0.5B layer
    heteroreason numerics --speed         # + a full-size 0.5B integer decode step
"""

from __future__ import annotations

import sys
import time

import numpy as np

from heteroreason.commands.common import command_parser
from heteroreason.model.experiments.report import format_table
from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.spec.numerics.qwen2_float import FloatDecoder, random_weights
from heteroreason.model.spec.numerics.qwen2_int8 import IntDecoder, activation_scales, quantize


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


QUALITY_MODELS = ("test-tiny", "test-small")  # the models whose W8A8 quality is measured


def quality(config, *, seed: int, positions: int, layers=None, calib_length=256):
    weights = random_weights(config, seed=seed, layers=layers)
    model = quantize(weights, activation_scales(weights, seed=seed + 100, length=calib_length))
    tokens = np.random.default_rng(seed + 200).integers(0, config.vocab, positions)
    f, q = FloatDecoder(weights), IntDecoder(model)
    f_logits, q_logits = f.prefill(tokens), q.prefill(tokens)
    return (cosine(f.last_hidden, q.dequantized_hidden()),
            cosine(f_logits, q.dequantized_logits(q_logits)),
            float(np.mean(f_logits.argmax(axis=1) == q_logits.argmax(axis=1))))


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--positions", type=int, default=300,
                        help="tokens decoded in the quality comparison")
    parser.add_argument("--full-layer", action="store_true",
                        help="also run one full-size layer (slow)")
    parser.add_argument("--speed", action="store_true",
                        help="also measure the integer reference's decode speed")
    args = parser.parse_args(argv)
    limit = min(qwen2_config(name).max_context for name in QUALITY_MODELS)
    if not 1 <= args.positions <= limit:  # a position past a model's context has no RoPE row
        parser.error(f"--positions must be an integer in [1, {limit}] (the context of "
                     f"{', '.join(QUALITY_MODELS)}), not {args.positions}")

    big = qwen2_config("qwen2.5-0.5b")
    print(f"{big.name}: {big.params / 1e6:.1f} M parameters, "
          f"{(big.params - big.embedding_params) / 1e6:.1f} M without embeddings, "
          f"KV {big.kv_bytes_per_token(2):.0f} B/token at 16 bits")
    rows = []
    for context in (0, 1024):
        counts = big.decode_counts(context)
        rows.append([context, f"{counts.total_macs / 1e6:.1f}", f"{counts.weight_bytes / 1e6:.1f}",
                     counts.kv_bytes_read, counts.kv_bytes_written, counts.activation_bytes]
                    + [f"{counts.macs[k] / 1e6:.2f}" for k in sorted(counts.macs)])
    names = sorted(big.decode_counts(0).macs)
    print(format_table(["context", "MMAC", "weight MB", "KV read B", "KV written B",
                        "activation B"] + [f"{n} MMAC" for n in names], rows))

    rows = []
    for name in QUALITY_MODELS:
        for seed in (1, 2, 3):
            h, lg, top1 = quality(qwen2_config(name), seed=seed, positions=args.positions)
            rows.append([name, seed, args.positions, f"{h:.5f}", f"{lg:.5f}", f"{100 * top1:.1f}"])
    if args.full_layer:
        start = time.monotonic()
        h, lg, top1 = quality(big, seed=1, positions=args.positions, layers=1, calib_length=64)
        rows.append([f"{big.name} (1 layer)", 1, args.positions, f"{h:.5f}", f"{lg:.5f}",
                     f"{100 * top1:.1f}"])
        print(f"(full-size layer: {time.monotonic() - start:.0f} s)")
    print(format_table(["model", "seed", "positions", "cos hidden", "cos logits", "top-1 %"],
                       rows))

    if args.speed:
        start = time.monotonic()
        weights = random_weights(big, seed=1)
        scales = activation_scales(weights, seed=2, sequences=1, length=8)
        model = quantize(weights, scales)
        setup = time.monotonic() - start
        dec = IntDecoder(model)
        dec.prefill([1, 2, 3, 4])
        times = []
        token = 5
        for _ in range(3):
            t0 = time.perf_counter()
            token = int(np.argmax(dec.decode(token)))
            times.append(time.perf_counter() - t0)
        print(f"{big.name} integer decode step: {min(times):.2f} s best of 3 "
              f"({', '.join(f'{t:.2f}' for t in times)}; setup {setup:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
