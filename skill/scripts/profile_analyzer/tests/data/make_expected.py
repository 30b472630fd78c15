"""Regenerate the analyzer's expected output on every trace of the real-artifact corpus.

    .venv/bin/python skill/scripts/profile_analyzer/tests/data/make_expected.py

Reads ``$ATTUNE_CORPUS_DIR/traces/<folder>/`` (default ``../shared/data``) in place and writes
``expected/<folder>.json``: what ``attune profile <folder> --json`` prints, with the corpus path
replaced by ``<corpus>``. Review the diff by eye before committing: the golden test only proves that
the output did not change. HTA's own numbers for the same traces are in ``hta_golden/``
(``make_hta_golden.py``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent.parent))
sys.path.insert(0, str(HERE.parent))

from analyzer_paths import TRACES  # noqa: E402

from attune.profile_analyzer import profile  # noqa: E402


def folders() -> list:
    return sorted(p for p in TRACES.iterdir() if p.is_dir()) if TRACES.is_dir() else []


def expected_for(folder: Path) -> dict:
    result = profile.run([folder])
    return json.loads(json.dumps(result, sort_keys=True, default=str).replace(str(TRACES), "<corpus>"))


def main() -> int:
    if not folders():
        print("no trace corpus at %s (set ATTUNE_CORPUS_DIR)" % TRACES, file=sys.stderr)
        return 2
    out = HERE / "expected"
    out.mkdir(exist_ok=True)
    for folder in folders():
        (out / (folder.name + ".json")).write_text(json.dumps(expected_for(folder), indent=1, sort_keys=True) + "\n")
        print("wrote", out / (folder.name + ".json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
