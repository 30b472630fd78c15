"""The correctness gate on real pairs: real Megatron-LM pretrain_gpt.py runs on this CPU, real 20-step loss curves.

    ATTUNE_MEGATRON_DIR=/path/to/Megatron-LM python bench/gate_megatron_cpu.py [--runs DIR]
        [--out bench/results/gate_megatron_cpu.json]

Placement pairs (a change that must not change the model's math: tensor parallel, sequence parallel, micro-batch
size, recompute, overlap flags, the distributed optimizer, loader workers, threads) must pass; numeric pairs (the
learning rate, the seed, the init std, dropout, a different global batch, another optimizer, bf16) must fail. Each
pair is the tiny-GPT recipe (``harness/recipes/gpt_tiny_cpu.yaml``) against one change, gated by
``correctness.gate.run_gate`` exactly as ``attune gate`` gates a campaign's run, with a second baseline run as
the repeat. ``--runs DIR`` reuses the runs ``bench_megatron_cpu.py --keep DIR`` left (``baseline-0`` is the
baseline, ``baseline-1`` its repeat, ``NAME-0`` each placement candidate); what is missing is run here. Reported per
pair: the verdict, the level and progress statistics against their thresholds, and the reasons.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import bench_megatron_cpu as lever_bench  # noqa: E402  (sets the import paths)
import megatron_cpu  # noqa: E402
from attune.core.recipe import Recipe  # noqa: E402
from attune.correctness import convergence  # noqa: E402
from attune.correctness import gate as gate_mod  # noqa: E402

_set = lever_bench._set
PLACEMENT = [name for name in lever_bench.VARIANTS if name != "baseline"]
NUMERIC = {
    "lr-x2": ([_set("--lr", "6e-4")], "learning rate 3e-4 -> 6e-4"),
    "seed": ([_set("--seed", "4321")], "another seed"),
    "init-std": ([_set("--init-method-std", "0.01")], "init std 0.02 -> 0.01"),
    "dropout": ([_set("--hidden-dropout", "0.1")], "hidden dropout 0 -> 0.1"),
    "gbs-32": ([_set("--global-batch-size", "32")], "global batch 16 -> 32"),
    "sgd": ([_set("--optimizer", "sgd")], "SGD instead of Adam"),
    "bf16": ([_set("--bf16")], "bf16 instead of fp32"),
}

# A layout the lever benchmark does not time: pipeline parallel 2 (each rank builds two of the four layers, and
# Megatron seeds each pipeline rank's random stream apart, so the initial weights are drawn anew).
LAYOUTS = {
    "tp-2": lever_bench.VARIANTS["tp-2"],
    "pp-2": ([_set("--pipeline-model-parallel-size", "2")], "pipeline parallel 2 (DP 1) instead of DP 2"),
}
# Each numeric change behind a layout change: what a faulty candidate that also moves the layout looks like. The
# gate's configuration check fails them by class; the loss check alone must catch them too.
FAULTY_LAYOUT = {"%s+%s" % (layout, name): (LAYOUTS[layout][0] + changes, "%s, with %s" % (LAYOUTS[layout][1], what))
                 for layout in LAYOUTS for name, (changes, what) in NUMERIC.items()}


def ensure(runs: Path, name: str, recipe: Recipe) -> Path:
    """``runs/name`` with its recipe.yaml and log.txt: reused when its log is there, else run now. For ``NAME-0``
    the first of ``NAME-0..2`` whose log shows all 20 iterations is taken (a run that failed has no curve)."""
    if name.endswith("-0"):
        for index in range(3):
            log = runs / ("%s-%d" % (name[:-2], index)) / "log.txt"
            if log.is_file() and "iteration       20/      20" in log.read_text(errors="replace"):
                name = "%s-%d" % (name[:-2], index)
                break
    workdir = runs / name
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "recipe.yaml").write_text(recipe.render(), encoding="utf-8")
    if not (workdir / "log.txt").is_file():
        row = lever_bench.run_once(recipe, workdir)
        print("ran %s: exit %s, %.0f s" % (name, row["exit_code"], row["wall_s"]), flush=True)
    return workdir


def summary(result: dict) -> dict:
    conv = result["convergence"]
    cal = conv.get("calibrated") or {}
    out = {"verdict": result["verdict"], "reasons": result["reasons"],
           "config_changes": [(c["kind"], c["name"]) for c in result["config"]["changes"]],
           "bridge_passed": conv["bridge"]["passed"]}
    for name in convergence.STATISTICS:
        stat = cal.get(name)
        if stat:
            out[name] = {key: stat.get(key) for key in ("value", "threshold", "threshold_basis", "rerun", "passed")}
    out["deterministic_reruns"] = cal.get("deterministic")
    out["calibrated_passed"] = cal.get("passed")
    out["same_init_basis"] = cal.get("same_init_basis")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=str(REPO / "bench" / "results" / "gate_megatron_cpu_runs"))
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "gate_megatron_cpu.json"))
    args = parser.parse_args(argv)
    megatron = megatron_cpu.find()
    megatron_cpu.build_helpers(megatron)
    base = Recipe(megatron_cpu.recipe_text(megatron), str(megatron_cpu.RECIPE))
    runs = Path(args.runs)
    baseline = ensure(runs, "baseline-0", base)
    repeat = ensure(runs, "baseline-1", base)
    pairs = [(name, "placement", lever_bench.VARIANTS[name][0], lever_bench.VARIANTS[name][1]) for name in PLACEMENT]
    pairs += [("pp-2", "placement", LAYOUTS["pp-2"][0], LAYOUTS["pp-2"][1])]
    pairs += [(name, "numeric", changes, what) for name, (changes, what) in NUMERIC.items()]
    pairs += [(name, "numeric", changes, what) for name, (changes, what) in FAULTY_LAYOUT.items()]
    table = []
    for name, kind, changes, what in pairs:
        candidate = ensure(runs, "%s-0" % name, base.apply(changes))
        expected = "pass" if kind == "placement" else "fail"
        if "iteration       20/      20" not in (candidate / "log.txt").read_text(errors="replace"):
            # it never trained (Megatron refused it on this host): no curve, nothing for the gate to judge
            table.append({"name": name, "kind": kind, "what": what, "expected": expected, "verdict": "did not run",
                          "reasons": ["no run of it finished: %s" % _last_error(candidate / "log.txt")],
                          "right": None})
            print("%-20s %-9s did not run" % (name, kind), flush=True)
            continue
        result = summary(gate_mod.run_gate(baseline, candidate, [repeat]))
        table.append(dict(result, name=name, kind=kind, what=what, expected=expected,
                          right=result["verdict"] == expected, run=candidate.name))
        print("%-20s %-9s %-5s (expected %s)%s" % (name, kind, result["verdict"], expected,
                                                    "" if result["verdict"] == expected else "  <-- WRONG"), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"megatron": str(megatron), "pairs": table}, indent=1) + "\n")
    print(render(table))
    layout = [row for row in table if row["name"] in FAULTY_LAYOUT and row.get("calibrated_passed") is not None]
    print("numeric changes behind a layout change caught by the loss check alone: %d/%d" % (
        sum(row["calibrated_passed"] is False for row in layout), len(layout)))
    placement = [row for row in table if row["kind"] == "placement" and row.get("calibrated_passed") is not None]
    print("placement changes the loss check rejects: %d/%d" % (
        sum(row["calibrated_passed"] is False for row in placement), len(placement)))
    return 0 if all(row["right"] is not False for row in table) else 1


def _last_error(log: Path) -> str:
    errors = [line.strip() for line in log.read_text(errors="replace").splitlines()
              if "Error: " in line and "ChildFailedError" not in line]  # the rank's error, not torchrun's summary
    return errors[0][:200] if errors else "no error line"


def _stat(row, name):
    stat = row.get(name)
    if not stat:
        return "n/a"
    return "%.3g%% / %.3g%%" % (100 * stat["value"], 100 * stat["threshold"])


def render(table) -> str:
    out = ["| pair | kind | change | verdict | expected | loss check | level (value / threshold) | "
           "progress (value / threshold) | drift (value / threshold) | widening (value / threshold) | reasons |",
           "|---|---|---|---|---|---|---:|---:|---:|---:|---|"]
    for row in table:
        loss = {True: "pass", False: "fail"}.get(row.get("calibrated_passed"), "n/a")
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            row["name"], row["kind"], row["what"], row["verdict"], row["expected"], loss, _stat(row, "level"),
            _stat(row, "progress"), _stat(row, "drift"), _stat(row, "widening"), "; ".join(row["reasons"])[:300].replace("|", "\\|")))
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
