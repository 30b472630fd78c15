"""Helpers shared by bench/gate_suite.py and bench/gate_real_curves.py: where the golden curves are,
Megatron-LM log lines in the real format (training_log in megatron/training/training.py), RayJob recipes in the shape of
skill/scripts/tests/data/recipes/megatron_rayjob.yaml, and the evaluation of run directories with
``attune gate`` (``--baseline B --candidate C --repeat R... --json``).

Nothing here writes outside the folder it is given. The golden curves are read in place from
``$ATTUNE_CORPUS_DIR/megatron_golden`` (default ``<repo>/../shared/data``); they are never copied.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
ATTUNE = REPO / "skill" / "scripts" / "attune.py"


# ----------------------------------------------------------------------------------------- corpus
def corpus_dir() -> Path:
    root = Path(os.environ.get("ATTUNE_CORPUS_DIR") or (REPO.parent / "shared" / "data"))
    return root / "megatron_golden"


def load_json(path: Path):
    with open(path, "r", encoding="utf-8") as handle:
        return json.load(handle)


def load_index(corpus: Path) -> dict:
    return load_json(corpus / "index.json")


def load_case(corpus: Path, name: str, _cache={}) -> dict:
    key = (str(corpus), name)
    if key not in _cache:
        _cache[key] = load_json(corpus / (name + ".json"))
    return _cache[key]


def metric_values(case: dict, metric: str, steps: int) -> list:
    """Values of ``metric`` at steps 1..steps as floats (nan where missing or "nan")."""
    block = (case.get("metrics") or {}).get(metric) or {}
    values = block.get("values") or {}
    out = []
    for step in range(1, steps + 1):
        raw = values.get(str(step), "nan")
        try:
            out.append(float(raw))
        except (TypeError, ValueError):
            out.append(float("nan"))
    return out


def effective(case: dict) -> tuple:
    """(MODEL_ARGS, ENV_VARS) that produced the curve (``effective_config`` when it differs from HEAD)."""
    eff = case.get("effective_config") or {}
    if isinstance(eff.get("MODEL_ARGS"), dict):
        return dict(eff["MODEL_ARGS"]), dict(eff.get("ENV_VARS") or {})
    return dict(case.get("MODEL_ARGS") or {}), dict(case.get("ENV_VARS") or {})


def diff_keys(pair: dict) -> tuple:
    """(arg flags, env names) that differ in a pair of index.json (added, removed or changed)."""
    def keys(block):
        block = block or {}
        return set(block.get("added") or {}) | set(block.get("removed") or {}) | set(block.get("changed") or {})
    return keys(pair.get("MODEL_ARGS_diff")), keys(pair.get("ENV_VARS_diff"))


# ------------------------------------------------------------------------------------ Megatron values
def _num(args: dict, flag: str, default=None):
    value = args.get(flag, default)
    if value is None or value is True:
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def learning_rate(args: dict, step: int) -> float:
    """Megatron's OptimizerParamScheduler.get_lr after ``step`` iterations (linear warmup, then
    cosine/linear/constant decay to --min-lr over --lr-decay-iters)."""
    max_lr = _num(args, "--lr", 0.0)
    min_lr = _num(args, "--min-lr", 0.0)
    decay = _num(args, "--lr-decay-iters", None) or _num(args, "--train-iters", 1.0)
    warmup = _num(args, "--lr-warmup-iters", None)
    if warmup is None:
        warmup = _num(args, "--lr-warmup-fraction", 0.0) * decay
    init = _num(args, "--lr-warmup-init", 0.0)
    if warmup > 0 and step <= warmup:
        return init + (max_lr - init) * step / warmup
    style = str(args.get("--lr-decay-style", "linear"))
    if style == "constant" or step > decay:
        return max_lr if style == "constant" else min_lr
    ratio = (step - warmup) / max(1.0, decay - warmup)
    if style == "cosine":
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    else:
        coeff = 1.0 - ratio
    return min_lr + coeff * (max_lr - min_lr)


def sizes(args: dict, world: int) -> dict:
    tp = int(_num(args, "--tensor-model-parallel-size", 1))
    pp = int(_num(args, "--pipeline-model-parallel-size", 1))
    cp = int(_num(args, "--context-parallel-size", 1))
    return {"world": world, "tp": tp, "pp": pp, "cp": cp, "dp": max(1, world // (tp * pp * cp))}


def startup_line(args: dict, world: int) -> str:
    s = sizes(args, world)
    return ("using world size: %d, data-parallel size: %d, context-parallel size: %d, hierarchical "
            "context-parallel sizes: None, tensor-model-parallel size: %d, pipeline-model-parallel size: %d"
            % (s["world"], s["dp"], s["cp"], s["tp"], s["pp"]))


def timestamp(start: _dt.datetime, seconds: float) -> str:
    return (start + _dt.timedelta(microseconds=int(round(seconds * 1e6)))).strftime("%Y-%m-%d %H:%M:%S.%f")


def iteration_line(ts: str, step: int, train_iters: int, consumed: int, elapsed_ms: float, lr, gbs: int,
                   loss, loss_scale: float, grad_norm=None, num_zeros=None, skipped: int = 0, nan: int = 0,
                   throughput=None) -> str:
    """One iteration line in Megatron-LM's HEAD format (training_log). ``loss``: a float,
    ``0.0`` for a skipped iteration (HEAD prints avg >= 0.0), or None when the average is NaN (then
    Megatron leaves the field out). ``grad_norm``: a float, "nan", or None (skipped: not printed)."""
    out = " [%s] iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration (ms): %.1f |" % (
        ts, step, train_iters, consumed, elapsed_ms)
    if throughput is not None:
        out += " throughput per GPU (TFLOP/s/GPU): %.1f |" % throughput
    if lr is not None:
        out += " learning rate: %.6E |" % lr
    out += " global batch size: %5d |" % gbs
    if loss is not None:
        out += " lm loss: %.6E |" % loss
    out += " loss scale: %.1f |" % loss_scale
    if grad_norm is not None:
        out += " grad norm: %s |" % (grad_norm if isinstance(grad_norm, str) else "%.3f" % grad_norm)
    if num_zeros is not None:
        out += " num zeros: %s |" % num_zeros
    out += " number of skipped iterations: %3d | number of nan iterations: %3d |" % (skipped, nan)
    return out


# ------------------------------------------------------------------------------------ noise helpers
def power_fit(t: np.ndarray, rms: np.ndarray) -> tuple:
    """(A, p) of rms = A t^p, least squares in log-log over the nonzero points."""
    ok = rms > 0
    if ok.sum() < 2:
        return float(rms[ok].mean()) if ok.any() else 0.0, 0.0
    p, log_a = np.polyfit(np.log(t[ok]), np.log(rms[ok]), 1)
    return float(math.exp(log_a)), float(p)


def lag1(z: np.ndarray) -> float:
    """Mean lag-1 product of normalised rows (the AR(1) coefficient), clipped to +-0.95."""
    if z.shape[1] < 2:
        return 0.0
    return float(np.clip(np.mean(z[:, 1:] * z[:, :-1]), -0.95, 0.95))


def ar1(rng, n: int, rho: float) -> np.ndarray:
    """n unit-variance AR(1) draws with coefficient rho."""
    z = np.zeros(n)
    if n:
        z[0] = rng.standard_normal()
        for i in range(1, n):
            z[i] = rho * z[i - 1] + math.sqrt(1 - rho * rho) * rng.standard_normal()
    return z


# ------------------------------------------------------------------------------------------ recipes
def _word(value) -> str:
    text = str(value)
    return text if text and all(c.isalnum() or c in "-_./:=,+" for c in text) else shlex.quote(text)


def entrypoint(args: dict, program: str = "pretrain_gpt.py", workdir: str = "/opt/megatron") -> str:
    """``cd workdir && python3 program --flag value ...``, one flag a line; True = a bare flag,
    False/None = left out."""
    parts = []
    for flag, value in args.items():
        if value is None or value is False:
            continue
        parts.append(flag if value is True else "%s %s" % (flag, _word(value)))
    lines = ["cd %s && python3 %s" % (workdir, program)] + ["  " + part for part in parts]
    return " \\\n".join(lines)


def dns_name(text: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return out[:63].rstrip("-")


def recipe_yaml(name: str, args: dict, env: dict, replicas: int, gpus_per_worker: int, comment: str,
                label: str = "gate-bench") -> str:
    body = entrypoint(args)
    env_lines = "".join("      %s: %s\n" % (k, json.dumps(str(v))) for k, v in env.items())
    return (
        "# %s\n"
        "apiVersion: ray.io/v1\n"
        "kind: RayJob\n"
        "metadata:\n"
        "  name: %s\n"
        "  labels:\n"
        "    attune/benchmark: %s\n"
        "spec:\n"
        "  shutdownAfterJobFinishes: true\n"
        "  ttlSecondsAfterFinished: 300\n"
        "  activeDeadlineSeconds: 3600\n"
        "  entrypoint: |\n"
        "%s\n"
        "  runtimeEnvYAML: |\n"
        "    env_vars:\n"
        "%s"
        "  rayClusterSpec:\n"
        "    rayVersion: \"2.40.0\"\n"
        "    headGroupSpec:\n"
        "      rayStartParams: {}\n"
        "      template:\n"
        "        spec:\n"
        "          containers:\n"
        "            - name: ray-head\n"
        "              image: registry.example.com/megatron:25.04\n"
        "    workerGroupSpecs:\n"
        "      - groupName: gpu-workers\n"
        "        replicas: %d\n"
        "        minReplicas: %d\n"
        "        maxReplicas: %d\n"
        "        rayStartParams: {}\n"
        "        template:\n"
        "          spec:\n"
        "            containers:\n"
        "              - name: ray-worker\n"
        "                image: registry.example.com/megatron:25.04\n"
        "                resources:\n"
        "                  limits:\n"
        "                    nvidia.com/gpu: %d\n"
    ) % (comment, dns_name(name), label, "\n".join("    " + line for line in body.split("\n")),
         env_lines or "      {}\n", replicas, replicas, replicas, gpus_per_worker)


def write_run(directory: Path, recipe: str, log_lines: list) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "recipe.yaml").write_text(recipe, encoding="utf-8")
    (directory / "log.txt").write_text("".join(line + "\n" for line in log_lines), encoding="utf-8")


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------ evaluation
def gate_available(python: str = sys.executable) -> bool:
    try:
        proc = subprocess.run([python, str(ATTUNE), "--help"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.split()[:1] == ["gate"] for line in proc.stdout.splitlines())


def run_gate(case_dir: Path, repeats: list, python: str = sys.executable, timeout: int = 300) -> dict:
    """One ``attune gate --json`` call. Returns {"rc", "result" (the JSON or None), "error"}."""
    cmd = [python, str(ATTUNE), "gate", "--baseline", str(case_dir / "baseline"),
           "--candidate", str(case_dir / "candidate")]
    for rep in repeats:
        cmd += ["--repeat", str(case_dir / rep)]
    cmd.append("--json")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(REPO))
    except subprocess.TimeoutExpired:
        return {"rc": None, "result": None, "error": "timeout"}
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return {"rc": proc.returncode, "result": None, "error": "rc %s: %s" % (proc.returncode, tail[0][:160])}
    return {"rc": proc.returncode, "result": result, "error": None}


def verdicts(outcome: dict) -> dict:
    """ours / bridge-only / config / convergence / bridge from one gate outcome ("error" when none)."""
    res = outcome.get("result")
    if not isinstance(res, dict):
        return {"ours": "error", "bridge_only": "error", "config": None, "convergence": None, "bridge": None,
                "calibrated": None, "checks": None, "layout_change": None, "same_init_measured": None}
    config = (res.get("config") or {}).get("passed")
    conv = res.get("convergence") or {}
    bridge = (conv.get("bridge") or {}).get("passed")
    bridge_only = "pass" if (config is True and bridge is True) else "fail"
    if config is None or bridge is None:
        bridge_only = "error"
    checks = res.get("checks") or {}
    checks_ok = all((c or {}).get("passed", True) for c in checks.values()) if isinstance(checks, dict) else None
    changes = (res.get("config") or {}).get("changes") or []
    return {"ours": res.get("verdict", "error"), "bridge_only": bridge_only, "config": config,
            "convergence": conv.get("passed"), "bridge": bridge,
            "calibrated": (conv.get("calibrated") or {}).get("passed"), "checks": checks_ok,
            "layout_change": any((change.get("rule") or {}).get("init") for change in changes),
            "same_init_measured": ((conv.get("calibrated") or {}).get("same_init_basis") or "").startswith(
                "the first iteration")}


# One Python that gates many pairs (the same ``correctness.gate.run_gate`` that ``attune gate`` calls, without a
# process start per pair): reads JSON lines {"dir", "repeats"} and writes one outcome per line.
_BATCH = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from attune.correctness.gate import run_gate
for line in sys.stdin:
    case = json.loads(line)
    root = Path(case["dir"])
    try:
        result = json.loads(json.dumps(run_gate(root / "baseline", root / "candidate",
                                                [root / r for r in case["repeats"]]), default=str))
        print(json.dumps({"rc": 0, "result": result, "error": None}), flush=True)
    except Exception as exc:  # noqa: B902 - reported per pair, like the CLI's exit 2
        print(json.dumps({"rc": 2, "result": None, "error": "%s: %s" % (type(exc).__name__, exc)}), flush=True)
"""


def run_batch(cases: list, python: str, root: Path) -> list:
    """Outcomes of ``run_gate`` on ``cases`` (dicts with "dir" and "repeats") by the gate of checkout ``root``."""
    text = "".join(json.dumps({"dir": str(c["dir"]), "repeats": list(c["repeats"])}) + "\n" for c in cases)
    proc = subprocess.run([python, "-c", _BATCH, str(Path(root) / "skill" / "scripts")], input=text,
                          capture_output=True, text=True, cwd=str(root))
    outcomes = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if len(outcomes) != len(cases):
        raise RuntimeError("the batch gate stopped after %d of %d pairs: %s" % (
            len(outcomes), len(cases), (proc.stderr.strip().splitlines() or [""])[-1]))
    return outcomes


def evaluate(rows: list, python: str = sys.executable, jobs: int = 0, batch: bool = False, root: Path = REPO) -> list:
    """rows: [{"name", "dir" (Path), "label", "repeats": [...]}]; adds the gate's verdicts to each. ``batch``: gate
    them in ``jobs`` Python processes instead of one ``attune gate`` process per pair (the same verdicts, faster);
    ``root``: the checkout whose gate judges (this one by default)."""
    jobs = jobs or min(8, os.cpu_count() or 1)
    if batch:
        slices = [rows[index::jobs] for index in range(jobs)]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            parts = list(pool.map(lambda part: run_batch(part, python, root), slices))
        by_row = {}
        for part, outcomes in zip(slices, parts):
            for row, outcome in zip(part, outcomes):
                by_row[id(row)] = outcome
        outcomes = [by_row[id(row)] for row in rows]
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            outcomes = list(pool.map(lambda row: run_gate(row["dir"], row["repeats"], python), rows))
    for row, outcome in zip(rows, outcomes):
        row.update(verdicts(outcome))
        row["error"] = outcome["error"]
        row["reasons"] = ((outcome.get("result") or {}).get("reasons") or [])[:3]
    return rows


def _fmt(flag) -> str:
    return "-" if flag is None else ("ok" if flag else "FAIL")


def print_table(rows: list, extra_col: str = None, by: str = None) -> dict:
    """The per-case table and the totals; returns the totals."""
    head = "%-44s %-11s %-12s %-6s %-11s %-6s %-6s %-6s %-6s %-6s" % (
        "case", "label", extra_col or "", "ours", "bridge-only", "config", "checks", "conv", "bridge", "calib")
    print(head)
    print("-" * len(head))
    for row in rows:
        print("%-44s %-11s %-12s %-6s %-11s %-6s %-6s %-6s %-6s %-6s%s" % (
            row["name"][:44], row["label"], str(row.get(extra_col) or "")[:12], row["ours"], row["bridge_only"],
            _fmt(row["config"]), _fmt(row["checks"]), _fmt(row["convergence"]), _fmt(row["bridge"]),
            _fmt(row["calibrated"]),
            ("  ERROR " + row["error"]) if row.get("error") else ""))
    legit = [r for r in rows if r["label"] == "legitimate"]
    faulty = [r for r in rows if r["label"] == "faulty"]
    tot = {
        "legit": len(legit), "faulty": len(faulty),
        "legit_rejected_ours": sum(r["ours"] == "fail" for r in legit),
        "legit_rejected_bridge_only": sum(r["bridge_only"] == "fail" for r in legit),
        "faulty_caught_ours": sum(r["ours"] == "fail" for r in faulty),
        "faulty_caught_bridge_only": sum(r["bridge_only"] == "fail" for r in faulty),
        "errors": sum(r["ours"] == "error" for r in rows),
        "missed_ours": [r["name"] for r in faulty if r["ours"] == "pass"],
        "missed_bridge_only": [r["name"] for r in faulty if r["bridge_only"] == "pass"],
        "legit_rejected_names": [r["name"] for r in legit if r["ours"] == "fail"],
    }
    print()
    print("legitimate rejected: ours %d/%d, Bridge-only %d/%d" % (
        tot["legit_rejected_ours"], tot["legit"], tot["legit_rejected_bridge_only"], tot["legit"]))
    print("faults caught:       ours %d/%d, Bridge-only %d/%d" % (
        tot["faulty_caught_ours"], tot["faulty"], tot["faulty_caught_bridge_only"], tot["faulty"]))
    if tot["errors"]:
        print("gate errors (no verdict): %d" % tot["errors"])
    print("faults missed by ours: %s" % (", ".join(tot["missed_ours"]) or "none"))
    print("legitimate rejected by ours: %s" % (", ".join(tot["legit_rejected_names"]) or "none"))
    for key in sorted({r.get(by) for r in faulty if by and r.get(by)}):
        part = [r for r in faulty if r.get(by) == key]
        print("  faults expected to be caught by %-11s: ours %d/%d, Bridge-only %d/%d" % (
            key, sum(r["ours"] == "fail" for r in part), len(part), sum(r["bridge_only"] == "fail" for r in part),
            len(part)))
    return tot
