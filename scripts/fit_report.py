#!/usr/bin/env python3
"""`heteroreason fit`: this script runs the same entry point (its options: `--help`)."""

import sys

from heteroreason.cli import script_main

if __name__ == "__main__":
    sys.exit(script_main("fit_report.py"))
