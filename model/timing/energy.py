"""Device power and energy.

Two methods, as the paper's figures need both:

* per-device integration: ``active_w x busy time + idle_w x idle time`` for each device
  (:func:`device_energy_j`);
* the paper's method: the measured busy-average *system* power x latency
  (:data:`SYSTEM_POWER`), e.g. 551.2 W / 80.3 tok/s = 6.86 J/token for three GPUs.

FPGA presets give one power figure (implementation report); the FPGA's clocks keep running
when it waits, so its idle power is taken equal to its active power.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEVICE_POWER", "SYSTEM_POWER", "DevicePower", "device_energy_j", "power"]


@dataclass(frozen=True)
class DevicePower:
    name: str
    active_w: float
    idle_w: float
    source: str = ""

    def __post_init__(self):
        if self.active_w < 0 or self.idle_w < 0:
            raise ValueError(f"{self.name}: power must not be negative")


DEVICE_POWER: dict[str, DevicePower] = {p.name: p for p in (
    DevicePower("rtx3090-7b", 349.0, 175.0, "DESIGN §8: RTX 3090 with a 7B model"),
    DevicePower("rtx3090-1.5b", 249.0, 125.0, "DESIGN §8: RTX 3090 with the 1.5B model"),
    DevicePower("rtx3090-0.5b", 249.0, 125.0,
                "no measurement for the 0.5B: the 1.5B's figures, an upper bound"),
    DevicePower("u280", 60.0, 60.0, "DESIGN §8: U280 60 W at 300 MHz (45 W measured at 200)"),
    DevicePower("v80", 120.0, 120.0, "DESIGN §8: V80 120 W"),
)}

# busy-average system power measured by the artifact (power_smoke_results.json)
SYSTEM_POWER: dict[str, dict[str, float]] = {
    "config1": {"three_gpu_w": 551.19, "fpga_gpu_gpu_w": 488.42},
    "config2": {"three_gpu_w": 506.55, "fpga_gpu_gpu_w": 438.09},
}


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
