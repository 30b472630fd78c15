"""Regenerate the gate's golden cases: run directories and each case's expected verdict.

    python3 skill/scripts/tests/data/make_gate_cases.py

Every curve is SYNTHETIC (``gate_factory.curve``: a smooth falling loss with a shared per-step
wobble); the logs use the real Megatron-LM iteration-line format. Review the diff of the expected
verdicts by eye before committing a regeneration: the golden test only proves the output did not
change.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE.parent))

from gate_factory import arg, curve, write_run  # noqa: E402

from attune.correctness.gate import run_gate  # noqa: E402

ROOT = HERE / "gate_cases"
BASE = curve()


def _drift(fraction):
    return [b + fraction * (BASE[0] - b) for b in BASE]


def _with(index, value):
    out = list(BASE)
    out[index] = value
    return out


# name: (candidate losses, candidate changes, extra keyword arguments for write_run)
CASES = {
    "pass_tensor_parallel": ([v * (1 + 0.0006 * ((i % 3) - 1)) for i, v in enumerate(BASE)],
                             [arg("--tensor-model-parallel-size", "4")], {}),
    "fail_learning_rate": (BASE, [arg("--lr", "6.0e-4")], {}),
    "fail_nan_loss": (_with(8, "nan"), [], {"nan": {9: 1}}),
    "fail_drift_behind_a_legal_flag": (_drift(0.06), [arg("--tp-comm-overlap")], {}),
    "fail_scheduling_change_not_exact": (_with(11, BASE[11] + 1e-5), [arg("--manual-gc")], {}),
    "fail_short_run": (BASE[:14], [], {}),
}


def normalize(result: dict, case_dir: Path) -> dict:
    """The verdict without what depends on where the files lie or on the rules file's bytes."""
    text = json.dumps(result, sort_keys=True, default=str).replace(str(case_dir) + "/", "")
    out = json.loads(text)
    out["rules"] = {"overrides": out["rules"]["overrides"]}
    for change in out["config"]["changes"]:
        change["rule"] = {"class": change["rule"]["class"], "from": change["rule"]["from"]}
    return out


def evaluate(case_dir: Path) -> dict:
    return normalize(run_gate(case_dir / "baseline", case_dir / "candidate", [case_dir / "repeat"]), case_dir)


def main() -> int:
    shutil.rmtree(ROOT, ignore_errors=True)
    for name, (losses, changes, extra) in CASES.items():
        case = ROOT / name
        write_run(case / "baseline", BASE)
        write_run(case / "repeat", BASE)
        write_run(case / "candidate", losses, changes, **extra)
        (case / "expected_verdict.json").write_text(json.dumps(evaluate(case), indent=2, sort_keys=True) + "\n")
    (ROOT / "SOURCE.md").write_text(
        "# gate_cases: SYNTHETIC run directories for the gate's golden test\n\n"
        "Written by `make_gate_cases.py`; the loss curves are made up (a smooth falling curve with a shared "
        "per-step wobble), in the real Megatron-LM iteration-line format. Nothing was measured.\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
