"""Cycles from waveforms: what the decoder core did, token by token, read from a Verilator VCD
with ``vcdvcd`` — the signals that mark a token (``busy``), its operators (``pc`` and ``layer``),
weight-stream beats (``wdata`` valid and ready), cycles waiting on weights (``weight_wait``) and
cycles the stream was held back (``buffer_full``), each sampled at the clock's rising edges."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

from vcdvcd import VCDVCD

from heteroreason.rtl.decoder.core import TOKEN_START_LATENCY
from heteroreason.rtl.decoder.operators import OPERATORS

__all__ = ["TokenActivity", "core_activity", "operator_name"]


def operator_name(pc: int) -> str:
    """The operator the sequencer runs at program counter ``pc`` (the operator table's order;
    one past the table is the sequencer's end cycle)."""
    return OPERATORS[pc].name if 0 <= pc < len(OPERATORS) else "end"


@dataclass
class TokenActivity:
    start_cycle: int  # the first cycle the core is busy with the token
    busy_cycles: int
    stream_beats: int = 0
    weight_wait: int = 0
    buffer_full: int = 0
    # busy cycles before the first operator (the sequencer starts from the token's registers)
    start_cycles: int = 0
    # (pc, layer, first cycle, cycles) per operator run: name them with operator_name(pc)
    operators: list[tuple[int, int, int, int]] = field(default_factory=list)


class _Sampled:
    def __init__(self, signal):
        self.times = [t for t, _ in signal.tv]
        self.values = [v for _, v in signal.tv]

    def at(self, time: int) -> int:
        k = bisect.bisect_right(self.times, time) - 1
        if k < 0:
            return 0
        value = self.values[k]
        return int(value, 2) if set(value) <= {"0", "1"} else 0


def _find(vcd: VCDVCD, top: str, name: str) -> str:
    for candidate in vcd.signals:
        scope, _, rest = candidate.rpartition(".")
        if scope == top and (rest == name or rest.startswith(name + "[")):
            return candidate
    raise KeyError(f"signal {top}.{name} is not in the waveform")


def core_activity(vcd_path: Path | str, *, top: str = "decoder_core") -> list[TokenActivity]:
    """Per token the core worked on: when, how long, and what the weight stream did."""
    names = {n: None for n in ("clk", "busy", "wdata__valid", "wdata__ready", "weight_wait",
                               "buffer_full", "pc", "layer")}
    vcd = VCDVCD(str(vcd_path), only_sigs=True)
    for name in names:
        names[name] = _find(vcd, top, name)
    vcd = VCDVCD(str(vcd_path), signals=list(names.values()), store_tvs=True)
    sig = {name: _Sampled(vcd[full]) for name, full in names.items()}
    clk = sig["clk"]
    rising = [t for t, v, prev in zip(clk.times[1:], clk.values[1:], clk.values[:-1],
                                      strict=True) if v == "1" and prev == "0"]
    tokens: list[TokenActivity] = []
    current = None
    op = None
    for cycle, edge in enumerate(rising):
        before = edge - 1  # the values the flip-flops take at this edge
        busy = sig["busy"].at(before)
        if busy and current is None:
            current = TokenActivity(start_cycle=cycle, busy_cycles=0)
            tokens.append(current)
            op = None
        if not busy:
            current = None
            continue
        current.busy_cycles += 1
        current.stream_beats += sig["wdata__valid"].at(before) & sig["wdata__ready"].at(before)
        current.weight_wait += sig["weight_wait"].at(before)
        current.buffer_full += sig["buffer_full"].at(before)
        if current.start_cycles < TOKEN_START_LATENCY:  # the sequencer is not started yet
            current.start_cycles += 1
            continue
        key = (sig["pc"].at(before), sig["layer"].at(before))
        if op is None or (op[0], op[1]) != key:
            op = [key[0], key[1], cycle, 0]
            current.operators.append(op)
        op[3] += 1
    for t in tokens:
        t.operators = [tuple(o) for o in t.operators]
    return tokens
