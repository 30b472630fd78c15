"""ATTUNE campaign core: settings, the append-only ledger, measurement, ranking and reports.

Every module here is importable without installing the project: ``skill/scripts/attune.py``
puts ``skill/scripts`` on ``sys.path`` and the package runs from a read-only copy of the tree.
"""

__version__ = "0.1.0"
