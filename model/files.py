"""The one way input files are read — UTF-8 text whose undecodable bytes are reported with the
file, line and column, and JSON whose duplicate keys are an error (not the last one silently
kept); each reader turns an :class:`InputError` into its own error type — and output paths are
checked before any work (:func:`output_problem`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

__all__ = ["InputError", "LoadedOnUse", "loads_json", "output_problem", "read_text",
           "write_text_atomic"]


class InputError(ValueError):
    """A file that cannot be read as text or JSON; ``where`` is ``file`` or ``file:line``."""

    def __init__(self, where: str, reason: str):
        self.where, self.reason = where, reason
        super().__init__(f"{where}: {reason}")


def read_text(path: Path | str) -> str:
    """The file's text (UTF-8); unreadable files and undecodable bytes raise
    :class:`InputError`."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(str(path), f"cannot be read: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(f"{path}:{line}", f"is not UTF-8 text (byte 0x{data[exc.start]:02x} "
                                           f"at column {column})") from None


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def loads_json(text: str, where: str):
    """Decode JSON; syntax errors and duplicate keys raise :class:`InputError` at ``where``
    (with the line when the text has several). NaN and Infinity decode as floats: each reader
    refuses them in the fields that must be finite, naming the field."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        at = f"{where}:{exc.lineno}" if "\n" in text.strip() else where
        raise InputError(at, f"is not valid JSON: {exc.msg} at column {exc.colno}") from None
    except ValueError as exc:  # a duplicate key
        raise InputError(where, f"is not valid JSON: {exc}") from None
    except RecursionError:  # the decoder's depth is Python's recursion limit
        raise InputError(where, "is not valid JSON here: nested deeper than "
                                f"{sys.getrecursionlimit()} levels") from None


def write_text_atomic(path: Path | str, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all: into a temporary file beside it, renamed
    over it (a reader, a second writer or an interrupt never sees it half written)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def output_problem(path: Path | str, *, folder: bool) -> str | None:
    """Why ``path`` cannot take an output folder (``folder``) or file, or None when it can:
    checked before a program starts its work, so that a minutes-long run never ends on an
    unwritable path."""
    path = Path(path)
    if folder:
        if path.exists() and not path.is_dir():
            return f"{path} exists and is not a folder"
        parent = path
    else:
        if path.is_dir():
            return f"{path} is a folder, not a file"
        parent = path.parent
    while not parent.exists():  # the folders that will be made
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a folder"
    if not os.access(parent, os.W_OK):
        return f"{parent} is not writable"
    return None


class LoadedOnUse(Mapping):
    """A table built by ``build`` on its first use, not at import (a table of presets whose
    entries read a data file): a read-only mapping like the dict ``build`` returns."""

    def __init__(self, build: Callable[[], dict]):
        self._build = build
        self._table: dict | None = None

    def _loaded(self) -> dict:
        if self._table is None:
            self._table = self._build()
        return self._table

    def __getitem__(self, key):
        return self._loaded()[key]

    def __iter__(self) -> Iterator:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

