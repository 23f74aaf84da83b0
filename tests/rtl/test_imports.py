"""Importing the RTL loads only the floors below it (the argument rules and the
specification), not the system or timing models."""

import subprocess
import sys


def test_rtl_imports_are_light():
    code = ("import sys, heteroreason.rtl.kvmu, heteroreason.rtl.draft_engine; "
            "print(sorted(m for m in sys.modules if m.startswith('heteroreason.model.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    loaded = eval(out)
    assert all(m == "heteroreason.model.checks" or m.startswith("heteroreason.model.spec")
               for m in loaded), loaded
