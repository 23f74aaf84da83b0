"""``python -m heteroreason``: the same as the ``heteroreason`` command."""

import sys

from heteroreason.cli import main

sys.exit(main())
