"""The data part's pre-ship check: the rows the campaign trained on are still the rows it declared.

Registered with ``attune.campaign.preship`` (listed in its ``PLUGIN_MODULES``): when the campaign's
settings name rows (``ATTUNE_ROWS_PATH``), their canonical ``rows_sha256`` must equal
``ATTUNE_ROWS_SHA256``, recomputed before shipping. On KubeRay the file is read through the log pod,
as the runs see it. A slime dump (``ATTUNE_ROWS_PATH`` naming its ``attune_dump.json``) is hashed by
``rollout.dump_sha256``: the manifest and each file it lists (next to it on the shared volume) are
copied out, and the rows are recomputed from the samples.
"""

from __future__ import annotations

import posixpath
import tempfile
from pathlib import Path

from attune.campaign import preship
from attune.core.errors import InputError


def rows_digest(settings) -> str:
    """The canonical rows_sha256 of the campaign's rows, read where the runs read them."""
    from attune.data.rollout import MANIFEST, dump_sha256, is_manifest, read_manifest
    from attune.data.rows import rows_sha256

    dump = is_manifest(settings.rows_path)
    if settings.backend == "kuberay":
        from attune.campaign import backends
        backend = backends.get("kuberay", settings)
        with tempfile.TemporaryDirectory() as tmp:
            local = backend.copy_out(settings.rows_path, Path(tmp) / (MANIFEST if dump else "rows.parquet"))
            if not dump:
                return rows_sha256(local)[0]
            folder = posixpath.dirname(settings.rows_path)
            for entry in read_manifest(local)["files"]:  # plain <id>.pt names: they stay inside tmp
                backend.copy_out(posixpath.join(folder, entry["file"]), Path(tmp) / entry["file"])
            return dump_sha256(local)[0]
    return (dump_sha256 if dump else rows_sha256)(settings.rows_path)[0]


def check_rows(settings):
    """The rows' rows_sha256 against ATTUNE_ROWS_SHA256 (checked when a campaign starts and at every run
    launch); None when the settings declare no rows. A mismatch is bad input."""
    if not settings.rows_path:
        return None
    digest = rows_digest(settings)
    if digest != settings.rows_sha256:
        raise InputError("ATTUNE_ROWS_SHA256=%s: the rows at ATTUNE_ROWS_PATH=%s hash to %s. Fix: rebuild or restore the "
                         "rows, or set ATTUNE_ROWS_SHA256 to what `attune rows sha` prints for the rows you mean"
                         % (settings.rows_sha256, settings.rows_path, digest))
    return digest


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
