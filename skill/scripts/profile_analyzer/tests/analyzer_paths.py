"""Import paths for the analyzer's tests (imported first by each), and where the real-artifact corpus is
(ATTUNE_CORPUS_DIR). Not a conftest.py: the main suite's conftest module name must stay its own."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent.parent
REPO = SCRIPTS.parent.parent
for path in (str(SCRIPTS), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

DATA = HERE / "data"
CORPUS = Path(os.environ.get("ATTUNE_CORPUS_DIR") or REPO.parent / "shared" / "data")
TRACES = CORPUS / "traces"
