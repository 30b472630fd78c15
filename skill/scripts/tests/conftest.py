"""Shared test setup: import paths, and every test's state kept under its own tmp_path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SCRIPTS = TESTS.parent
REPO = SCRIPTS.parent.parent
for path in (str(SCRIPTS), str(TESTS)):
    if path not in sys.path:
        sys.path.insert(0, path)

DATA = TESTS / "data"
# where real artifacts are read from: kept from the shell (the corpus, a Megatron-LM checkout and its cache)
KEPT = ("ATTUNE_CORPUS_DIR", "ATTUNE_MEGATRON_DIR", "ATTUNE_MEGATRON_ARCHIVE", "ATTUNE_CACHE_DIR")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """No setting leaks in from the developer's shell; the default campaign is tmp_path."""
    for key in list(os.environ):
        if key.startswith(("ATTUNE_", "AUTOTUNE_")) and key not in KEPT:
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("ATTUNE_CAMPAIGN_DIR", str(tmp_path / "campaign"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # integrity keys (harness/integrity_key.py)
    yield


@pytest.fixture
def without_replay(monkeypatch):
    """For tests of shipping from a SYNTHETIC campaign (``data/campaign_basic``, ``factory.Builder``): its rows have
    no run logs behind them, so the replay pre-ship check refuses every one of them (test_replay.py shows it);
    these tests are about the other checks and what the report says, and run without it."""
    from attune.campaign import preship
    monkeypatch.delitem(preship.CHECKS, "replay")
