"""The kernel: what every other part of ATTUNE stands on, importing none of them.

Errors and exit codes, files, recipe and command parsing, legality, log formats and parsing, levers,
the chained log and its schema, settings, measurement and statistics, and ``state`` (the ledger read
the way the harness's hooks read it). ``chainlog``, ``schema``, ``errors`` and ``state`` use only the
standard library and Python 3.7 syntax: the hooks import them from the campaign's skill copy.
"""

from attune import __version__  # noqa: F401
