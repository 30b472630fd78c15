"""Regenerate the checked-in campaign fixtures and their golden RESULTS.md.

    python3 skill/scripts/tests/data/make_fixtures.py

The numbers are SYNTHETIC (see campaign_basic/SOURCE.md). Review the diff of the golden files
by eye before committing a regeneration: the golden test only proves that output did not change.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE.parent))

from attune import cli  # noqa: E402
from factory import Builder, jittered  # noqa: E402

SOURCE = """# campaign_basic: a SYNTHETIC campaign ledger

Written by `make_fixtures.py` through the real `attune` library. Every number in it is
synthetic test data chosen to exercise ranking (baseline repeats, a confirmed and gated leader, a
failed run, a NaN loss, a run within the band, an unconfirmed faster candidate, a run in flight).
None of it was measured on hardware. `expected_RESULTS.md` is what `attune rank --no-chart`
writes for this ledger.
"""


def campaign_basic(directory: Path) -> None:
    b = Builder(directory, note="SYNTHETIC test fixture: every number is made up to exercise ranking; "
                                "nothing was measured")
    base = 3400.0
    b.launch("r001", "baseline", "base", hypothesis="untuned baseline")
    b.result("r001", jittered(base, 0.02, 1))
    b.launch("r002", "repeat", "base", parent="r001")
    b.result("r002", jittered(base * 1.004, 0.02, 2))
    b.launch("r003", "repeat", "base", parent="r001")
    b.result("r003", jittered(base * 0.997, 0.02, 3))
    overlap = [{"op": "set", "arg": "--overlap-grad-reduce"}, {"op": "set", "arg": "--overlap-param-gather"}]
    b.launch("r004", "candidate", "overlap", parent="r001", change=overlap, lever="overlap-grad-reduce",
             hypothesis="data-parallel all-reduce is exposed; overlapping it with backward should cut step time ~6%")
    b.result("r004", jittered(base * 0.94, 0.02, 4))
    b.launch("r005", "confirm", "overlap", parent="r004")
    b.result("r005", jittered(base * 0.942, 0.02, 5))
    b.gate("r004", "pass", against="r001")
    b.launch("r006", "candidate", "mbs2", parent="r004", lever="micro-batch-size",
             change=[{"op": "set", "arg": "--micro-batch-size", "value": "2"}],
             hypothesis="larger micro-batches raise GEMM efficiency")
    b.result("r006", status="failed", failure={"class": "oom", "detail": "CUDA out of memory on rank 3"})
    b.launch("r007", "candidate", "fp8", parent="r004", lever="fp8", change=[{"op": "set", "arg": "--fp8-format",
                                                                              "value": "hybrid"}],
             hypothesis="fp8 GEMMs")
    b.result("r007", jittered(base * 0.80, 0.02, 7), nan_at=9)
    b.launch("r008", "candidate", "nccl", parent="r004", lever="nccl-env",
             change=[{"op": "set", "env": "NCCL_NVLS_ENABLE", "value": "1"}], hypothesis="NVLS all-reduce | faster")
    b.result("r008", jittered(base * 0.937, 0.02, 8))
    b.launch("r009", "candidate", "tp-overlap", parent="r004", lever="tp-comm-overlap",
             change=[{"op": "set", "arg": "--tp-comm-overlap"}], hypothesis="hide TP collectives")
    b.result("r009", jittered(base * 0.90, 0.02, 9))
    b.launch("r010", "candidate", "recompute", parent="r004", lever="recompute",
             change=[{"op": "remove", "arg": "--recompute-granularity"}], hypothesis="drop recompute")
    b.campaign.append("note", ts=b.clock(), text="r010 is still running", run="r010")
    assert cli.main(["rank", "--campaign", str(directory), "--no-chart"]) == 0


def main() -> int:
    target = HERE / "campaign_basic"
    if target.exists():
        shutil.rmtree(target)
    campaign_basic(target)
    os.replace(target / "RESULTS.md", target / "expected_RESULTS.md")
    (target / "SOURCE.md").write_text(SOURCE)
    print("wrote", target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
