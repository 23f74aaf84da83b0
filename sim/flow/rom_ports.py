"""Read-only memories with many read ports split into copies of two ports each, in RTLIL text.

A table read by every lane (RoPE's sine and cosine by 32, the attention's exponential by 28)
is one memory with as many read ports. Yosys 0.23's ``memory_libmap`` searches the ways to
share a RAM cell's ports among them and runs out of memory well before 32 (tens of GB); what a
device does is a copy of the table a pair of reads, each copy a dual-port block RAM (or LUT
RAM where small). :func:`split_rom_read_ports` writes that out: a memory that nothing writes
(its contents from ``$meminit_v2`` only) and that has more than two ``$memrd_v2`` ports becomes
one memory per pair of ports, each initialized alike. Nothing a simulator or a netlist reads
changes: each read sees the same constant contents.
"""

from __future__ import annotations

import re
from collections import defaultdict

__all__ = ["PORTS_PER_COPY", "split_rom_read_ports"]

PORTS_PER_COPY = 2  # a block RAM's two ports
_MEMORY = re.compile(r"^(\s*)memory (.*)(\\\S+)$")
_MEMID = re.compile(r'^(\s*parameter \\MEMID )"\\\\(\S+)"$')


def _blocks(lines: list[str]) -> list[list[str]]:
    """A module's lines grouped: a cell from ``cell`` to its ``end``, every other line alone."""
    out, cell, indent = [], None, 0
    for line in lines:
        if cell is not None:
            cell.append(line)
            if line.strip() == "end" and len(line) - len(line.lstrip()) == indent:
                out.append(cell)
                cell = None
        elif line.lstrip().startswith("cell "):
            cell, indent = [line], len(line) - len(line.lstrip())
        else:
            out.append([line])
    if cell is not None:
        raise ValueError("RTLIL: a cell without its end")
    return out


def _cell(block: list[str]) -> tuple[str, str | None]:
    """A cell block's type and the memory it names (None for another cell or a line)."""
    words = block[0].split()
    if len(block) == 1 or words[0] != "cell":
        return "", None
    for line in block[1:]:
        m = _MEMID.match(line)
        if m:
            return words[1], m.group(2)
    return words[1], None


def _split_module(lines: list[str]) -> list[str]:
    blocks = _blocks(lines)
    kinds: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for block in blocks:
        kind, memid = _cell(block)
        if memid is not None:
            kinds[memid][kind] += 1
    split = {m for m, k in kinds.items()
             if not k.get("$memwr_v2") and k.get("$memrd_v2", 0) > PORTS_PER_COPY}
    if not split:
        return lines
    inits: dict[str, list[list[str]]] = defaultdict(list)
    for block in blocks:
        kind, memid = _cell(block)
        if memid in split and kind == "$meminit_v2":
            inits[memid].append(block)
    seen: dict[str, int] = defaultdict(int)
    out: list[str] = []
    for block in blocks:
        kind, memid = _cell(block)
        if len(block) == 1:
            m = _MEMORY.match(block[0])
            if m and m.group(3)[1:] in split:
                name, ports = m.group(3)[1:], kinds[m.group(3)[1:]]["$memrd_v2"]
                out.append(block[0])
                for copy in range(1, -(-ports // PORTS_PER_COPY)):
                    out.append(f"{m.group(1)}memory {m.group(2)}\\{name}$copy{copy}")
                continue
        if memid in split and kind == "$memrd_v2":
            copy = seen[memid] // PORTS_PER_COPY
            seen[memid] += 1
            if copy:
                block = [_rename(line, memid, copy) for line in block]
        out.extend(block)
        if memid in split and kind == "$meminit_v2" and block is inits[memid][-1]:
            ports = kinds[memid]["$memrd_v2"]
            for copy in range(1, -(-ports // PORTS_PER_COPY)):
                for init in inits[memid]:
                    head = init[0].rstrip() + f"$copy{copy}"
                    out.extend([head] + [_rename(line, memid, copy) for line in init[1:]])
    return out


def _rename(line: str, memid: str, copy: int) -> str:
    m = _MEMID.match(line)
    if m and m.group(2) == memid:
        return f'{m.group(1)}"\\\\{memid}$copy{copy}"'
    return line


def split_rom_read_ports(text: str) -> str:
    """``text`` (RTLIL) with each read-only memory of more than two read ports split into
    copies of two ports (see the module docstring)."""
    lines = text.split("\n")
    out: list[str] = []
    module: list[str] | None = None
    for line in lines:
        if module is None:
            out.append(line)
            if line.startswith("module "):
                module = []
        elif line == "end":
            out.extend(_split_module(module))
            out.append(line)
            module = None
        else:
            module.append(line)
    if module is not None:
        raise ValueError("RTLIL: a module without its end")
    return "\n".join(out)
