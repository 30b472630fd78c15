#!/usr/bin/env python3
"""attune: the ATTUNE campaign CLI. Run it as ``python3 skill/scripts/attune.py <verb> ...``.

It needs no install of the project: this folder is the ``attune`` package (installed, ``pip install``
maps it to ``attune``), and this file loads it from the tree it sits in, so a campaign runs the
read-only, hashed copy of the skill it keeps, never another install. ``python3 skill/scripts/attune.py
--help`` lists the verbs.

Imported as the top-level module ``attune`` (a program that put this folder on ``sys.path``: a hook, a
script run as a file), it puts the package in its own place, so ``import attune`` gives the package
and ``import attune.core`` its kernel. Imported as ``attune.attune`` (an installed package) it does
nothing.
"""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load():
    """The ``attune`` package from this folder, registered as ``sys.modules["attune"]``; this folder
    leaves ``sys.path``, so none of its subpackages is importable under a top-level name of its own."""
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != HERE]
    spec = importlib.util.spec_from_file_location("attune", os.path.join(HERE, "__init__.py"),
                                                  submodule_search_locations=[HERE])
    package = importlib.util.module_from_spec(spec)
    sys.modules["attune"] = package
    spec.loader.exec_module(package)
    return package


if __name__ in ("__main__", "attune"):
    load()

if __name__ == "__main__":
    if sys.version_info < (3, 10):
        sys.stderr.write("attune: Python 3.10 or later is needed (this is %d.%d)\n" % sys.version_info[:2])
        raise SystemExit(2)
    from attune.cli import main
    raise SystemExit(main())
