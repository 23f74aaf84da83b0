"""Importing the RTL does not load the system or timing models."""

import subprocess
import sys


def test_rtl_imports_are_light():
    code = ("import sys, heteroreason.rtl.kvmu, heteroreason.rtl.draft_engine; "
            "print(sorted(m for m in sys.modules if m.startswith('heteroreason.model.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    loaded = eval(out)
    assert all(m.startswith(("heteroreason.model.numerics", "heteroreason.model.golden"))
               for m in loaded), loaded
