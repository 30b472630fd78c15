#!/usr/bin/env python3
"""attune: the ATTUNE campaign CLI. Run it as ``python3 skill/scripts/attune.py <verb> ...``.

It needs no install of the project: it puts its own folder on ``sys.path`` and imports
``attune_core``, so it runs from the read-only, hashed copy of the skill each campaign keeps.
``python3 skill/scripts/attune.py --help`` lists the verbs.
"""

import os
import sys

if sys.version_info < (3, 10):
    sys.stderr.write("attune: Python 3.10 or later is needed (this is %d.%d)\n" % sys.version_info[:2])
    raise SystemExit(2)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from attune_core.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
