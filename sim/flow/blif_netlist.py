"""A Yosys ``write_blif -blackbox -conn`` netlist read into its modules: each module's ports and,
net by net (aliases joined), the pins that drive it and the pins it loads
(:mod:`~heteroreason.sim.flow.hierarchy` counts units, links and fanout from them)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CONSTANTS", "NetlistModule", "read_modules", "read_ports", "statements"]

CONSTANTS = ("$false", "$true", "$undef")  # the nets BLIF ties to a constant


def statements(blif: Path) -> Iterator[list[str]]:
    """The BLIF's statements, continuation lines joined, split into words."""
    pending = ""
    with open(blif) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            words = (pending + line).split()
            pending = ""
            if words and not words[0].startswith("#"):
                yield words


def read_ports(blif: Path) -> dict[str, tuple[set[str], set[str], bool]]:
    """Each model's input and output pins and whether it is a black box (a primitive)."""
    models: dict[str, tuple[set[str], set[str], bool]] = {}
    name = None
    for words in statements(blif):
        if words[0] == ".model":
            name = words[1]
            models[name] = (set(), set(), False)
        elif words[0] == ".inputs":
            models[name][0].update(words[1:])
        elif words[0] == ".outputs":
            models[name][1].update(words[1:])
        elif words[0] == ".blackbox":
            models[name] = (*models[name][:2], True)
    return models


class NetlistModule:
    """One module's nets: aliases joined, and each net's drivers and loads as (cell type,
    pin) pairs (a child's pin: its model and pin name)."""

    def __init__(self, inputs: set[str], outputs: set[str]):
        self.parent: dict[str, str] = {}
        self.drivers: dict[str, list] = defaultdict(list)
        self.loads: dict[str, list] = defaultdict(list)
        self.inputs, self.outputs = inputs, outputs

    def find(self, net: str) -> str:
        root = net
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while net != root:
            self.parent[net], net = root, self.parent[net]
        return root

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def read_modules(blif: Path, ports) -> dict[str, NetlistModule]:
    modules: dict[str, NetlistModule] = {}
    current = None
    for words in statements(blif):
        head = words[0]
        if head == ".model":
            current = None if ports[words[1]][2] else NetlistModule(*ports[words[1]][:2])
            if current is not None:
                modules[words[1]] = current
        elif current is None:
            continue
        elif head == ".conn" or (head == ".names" and len(words) == 3):
            current.join(words[1], words[2])  # an alias, or a buffer ``.names a b`` / ``1 1``
        elif head == ".subckt":
            kind = words[1]
            outs = ports[kind][1]
            for pin_net in words[2:]:
                pin, _, net = pin_net.partition("=")
                if net in CONSTANTS:
                    continue
                (current.drivers if pin in outs else current.loads)[net].append((kind, pin))
    for module in modules.values():  # aliases share one name: the root's
        for table in (module.drivers, module.loads):
            merged: dict[str, list] = defaultdict(list)
            for net, pins in table.items():
                merged[module.find(net)].extend(pins)
            table.clear()
            table.update(merged)
    return modules
