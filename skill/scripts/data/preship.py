"""The data part's pre-ship check: the rows the campaign trained on are still the rows it declared.

Registered with ``attune_core.preship`` (listed in its ``PLUGIN_MODULES``): when the campaign's
settings name rows (``ATTUNE_ROWS_PATH``), their canonical ``rows_sha256`` must equal
``ATTUNE_ROWS_SHA256``, recomputed before shipping. On KubeRay the file is read through the log pod,
as the runs see it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from attune_core import preship


def rows_digest(settings) -> str:
    """The canonical rows_sha256 of the campaign's rows, read where the runs read them."""
    from .rows import rows_sha256

    if settings.backend == "kuberay":
        from attune_core import backends
        with tempfile.TemporaryDirectory() as tmp:
            local = backends.get("kuberay", settings).copy_out(settings.rows_path, Path(tmp) / "rows.parquet")
            return rows_sha256(local)[0]
    return rows_sha256(settings.rows_path)[0]


def _rows(context):
    settings = context.snapshot.settings
    if not settings.rows_path:
        return True, "ATTUNE_ROWS_PATH is not set: the campaign declared no rows to check"
    digest = rows_digest(settings)
    if digest != settings.rows_sha256:
        return False, "the rows at %s hash to %s, not ATTUNE_ROWS_SHA256=%s" % (settings.rows_path, digest[:16],
                                                                                settings.rows_sha256[:16])
    return True, "rows_sha256 %s matches" % digest[:16]


preship.register("rows_sha256", _rows)
