"""Device power and energy.

Two methods, as the paper's figures need both:

* per-device integration: ``active_w x busy time + idle_w x idle time`` for each device
  (:func:`device_energy_j`);
* the paper's method: the measured busy-average *system* power x latency (the configurations'
  ``three_gpu_system_w`` and ``fpga_system_w``, :mod:`heteroreason.model.system.config`), e.g.
  551.2 W / 80.3 tok/s = 6.86 J/token for three GPUs.

GPU presets are here; an FPGA board's power is the board's
(:func:`heteroreason.model.timing.fpga.platform.board_power`).
"""

from __future__ import annotations

from dataclasses import dataclass

from heteroreason.model import checks

__all__ = ["DEVICE_POWER", "DevicePower", "device_energy_j", "power"]


@dataclass(frozen=True)
class DevicePower:
    """A device's power: busy (``active_w``) and idle (``idle_w``), in watts, with its source."""

    name: str
    active_w: float
    idle_w: float
    source: str = ""

    def __post_init__(self):
        for key in ("active_w", "idle_w"):
            value = getattr(self, key)
            checks.number(f"{self.name}: {key}", value, low=0)


DEVICE_POWER: dict[str, DevicePower] = {p.name: p for p in (
    DevicePower("rtx3090-7b", 349.0, 175.0, "docs/design.md §8: RTX 3090 with a 7B model"),
    DevicePower("rtx3090-1.5b", 249.0, 125.0, "docs/design.md §8: RTX 3090 with the 1.5B model"),
    DevicePower("rtx3090-0.5b", 249.0, 125.0,
                "no measurement for the 0.5B: the 1.5B's figures, an upper bound"),
)}


def power(name: str) -> DevicePower:
    if name not in DEVICE_POWER:
        raise KeyError(f"unknown device power preset {name!r}; choose one of "
                       f"{', '.join(DEVICE_POWER)}")
    return DEVICE_POWER[name]


def device_energy_j(device: DevicePower, *, busy_ms: float, total_ms: float) -> float:
    """Energy of one device over ``total_ms`` of which it was busy ``busy_ms``."""
    if busy_ms < 0 or total_ms < 0:
        raise ValueError("times must not be negative")
    if busy_ms > total_ms * (1 + 1e-9):
        raise ValueError(f"busy time {busy_ms} ms exceeds the total {total_ms} ms")
    busy_ms = min(busy_ms, total_ms)
    return 1e-3 * (device.active_w * busy_ms + device.idle_w * (total_ms - busy_ms))
