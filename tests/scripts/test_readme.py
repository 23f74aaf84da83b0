"""The README's layout table is true: every package it lists exists with the modules it names,
every package of the project is listed, and each stands on the floor the structure test gives
it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def layout_table() -> list[tuple[str, str, str, str]]:
    """``(floor, folder, package, what)`` of every row."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`"):
            rows.append((cells[0], cells[1].strip("`"), cells[2].strip("`"), cells[3]))
    return rows


def layout_rows() -> list[tuple[str, str, str]]:
    return [(folder, package, what) for _, folder, package, what in layout_table()]


def test_every_package_stands_on_the_floor_the_structure_test_gives_it():
    import importlib.util

    spec = importlib.util.spec_from_file_location("structure", ROOT / "tests" /
                                                  "test_structure.py")
    structure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(structure)
    for floors, folder, package, _ in layout_table():
        if package == "—":
            continue
        modules = [p.stem for p in (ROOT / folder).glob("*.py") if p.stem != "__init__"]
        actual = {structure._floor(f"{package}.{m}") for m in modules} or \
            {structure._floor(package)}
        assert actual == {int(f) for f in floors.split(",")}, (package, floors, actual)


def test_every_listed_folder_and_module_exists():
    rows = layout_rows()
    assert len(rows) >= 14
    for folder, package, what in rows:
        path = ROOT / folder
        assert path.is_dir(), folder
        if package == "—":
            continue
        assert (path / "__init__.py").exists(), folder
        # the modules a row names in parentheses: (`a`, `b`) or (`a.Name`); folders end in /
        for group in re.findall(r"\(([^()]*`[^()]*)\)", what):
            for name, slash in re.findall(r"`([a-z_0-9]+)(?:\.[A-Za-z_.]+)?(/?)`", group):
                if slash:
                    assert (path / name).is_dir(), (folder, name)
                else:
                    assert (path / f"{name}.py").exists(), (folder, name)


def test_every_package_is_listed():
    listed = {folder.rstrip("/") for folder, package, _ in layout_rows() if package != "—"}
    packages = {str(p.parent.relative_to(ROOT)) for top in ("rtl", "model", "sim")
                for p in (ROOT / top).glob("**/__init__.py")} - {"sim"}
    # a package's own subfolders (sim/verify/tb) are named in its row
    unlisted = {p for p in packages - listed if not any(p.startswith(f + "/") for f in listed)}
    assert not unlisted, unlisted
