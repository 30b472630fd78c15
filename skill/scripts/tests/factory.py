"""Build campaign records for tests and benchmarks through the real library (no hand-written rows).

Every number these helpers produce is SYNTHETIC test data: chosen to exercise ranking, not
measured on any hardware.
"""

from __future__ import annotations

import datetime
import hashlib
import random
import time
from pathlib import Path

from attune.campaign import ledger as campaign_mod
from attune.core import settings as settings_mod
from attune.core.measure import encode_float

def local_campaign(tmp_path, recipe_text: str, prefix: str, campaign_id: str, **extra):
    """Yield ``(campaign, settings)``: a campaign on the local backend whose baseline is ``recipe_text`` and whose
    budget is 20 runs (``extra``: more settings); every run it launched is torn down afterwards (for a fixture:
    ``yield from``)."""
    from attune.campaign import runs
    baseline = Path(tmp_path) / "baseline.yaml"
    baseline.write_text(recipe_text)
    made_settings = settings(**dict(dict(ATTUNE_BASELINE_YAML=str(baseline), ATTUNE_RUN_PREFIX=prefix,
                                         AUTOTUNE_GPUH_BUDGET="", AUTOTUNE_BUDGET="20"), **extra))
    made = campaign_mod.init(Path(tmp_path) / "c", made_settings, campaign_id)
    yield made, made_settings
    for run_dir in (made.dir / "runs").glob("*") if (made.dir / "runs").exists() else []:
        try:
            runs.backends.get("local").teardown(run_dir, grace_s=1.0)
        except Exception:
            pass


def wait(campaign, made_settings, run, states, timeout=60.0):
    """Poll ``run`` until its state is one of ``states``; fail the test after ``timeout`` seconds."""
    from attune.campaign import runs
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = runs.poll(campaign, made_settings, run)
        if status.state in states:
            return status
        time.sleep(0.1)
    raise AssertionError("run %s did not reach %s: %s" % (run, states, runs.poll(campaign, made_settings, run)))


BASE_ENV = {
    "ATTUNE_RUN_PREFIX": "test-fixture-",
    "ATTUNE_BASELINE_YAML": "baseline.yaml",
    "ATTUNE_BACKEND": "local",
    "AUTOTUNE_GPUH_BUDGET": "40",
    "ATTUNE_GPU_HOUR_USD": "2.50",
    # many tests launch a candidate beside a baseline still running, to test something else; the limit itself
    # (launch refuses past ATTUNE_MAX_IN_FLIGHT) is tested with its default of 1 in test_launch_atomic.py
    "ATTUNE_MAX_IN_FLIGHT": "8",
}


def settings(**overrides):
    env = dict(BASE_ENV)
    env.update(overrides)
    return settings_mod.load(env)


def iterations(step_ms, n=20, loss0=10.5, nan_at=None, skipped_at=None, drop=()):
    """Per-iteration columns; ``step_ms`` is one number or a list of ``n`` numbers."""
    steps = step_ms if isinstance(step_ms, list) else [step_ms] * n
    kept = [index for index in range(1, n + 1) if index not in drop]
    return {
        "iter": kept,
        "step_ms": [float(steps[index - 1]) for index in kept],
        "loss": [encode_float(float("nan")) if index == nan_at else round(loss0 - 0.12 * index, 6) for index in kept],
        "skipped": [1 if index == skipped_at else 0 for index in kept],
        "nan": [0 for _ in kept],
    }


def metrics(step_ms, gbs=128, seq=4096, gpus=8, **kwargs):
    out = {"global_batch_size": gbs, "seq_length": seq, "gpus": gpus}
    out.update(iterations(step_ms, **kwargs))
    return out


def recipe_sha(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


class Clock(object):
    """Deterministic timestamps: one minute apart from a fixed start."""

    def __init__(self, start="2026-11-02T09:00:00"):
        self.now = datetime.datetime.strptime(start, "%Y-%m-%dT%H:%M:%S")

    def __call__(self, minutes=1):
        self.now += datetime.timedelta(minutes=minutes)
        return self.now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Builder(object):
    """Write a campaign through ``attune.campaign.ledger`` with deterministic times."""

    def __init__(self, directory, settings_obj=None, campaign_id="test-fixture-20261102", clock=None, note=None):
        self.clock = clock or Clock()
        self.settings = settings_obj or settings()
        self.campaign = campaign_mod.init(Path(directory), self.settings, campaign_id, ts=self.clock(), note=note)

    def launch(self, run, purpose, recipe, gpus=8, parent=None, change=None, hypothesis=None, lever=None,
               expected_gpu_hours=0.25, write_recipe=True, simulated=None, pod_hooks=None, cpu=None, leave_out=None):
        text = "# recipe %s\nkind: RayJob\n" % recipe
        sha = hashlib.sha256(text.encode()).hexdigest()
        payload = {"run": run, "purpose": purpose, "recipe_sha256": sha, "gpus": gpus, "backend": "local"}
        if expected_gpu_hours is not None:  # None: a launch without an estimate
            payload["expected_gpu_hours"] = expected_gpu_hours
        if parent is not None:
            payload["parent"] = parent
        if change is not None:
            payload["change"] = change
        if hypothesis:
            payload["hypothesis"] = hypothesis
        if lever:
            payload["lever"] = lever
        if simulated is not None:
            payload["simulated"] = simulated
        if pod_hooks is not None:
            payload["pod_hooks"] = pod_hooks
        if cpu is not None:
            payload["cpu"] = cpu
        if leave_out is not None:
            payload["leave_out"] = leave_out
        if write_recipe:
            directory = self.campaign.run_dir(run)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "recipe.yaml").write_text(text)
        return self.campaign.append("launch", ts=self.clock(), **payload)

    def result(self, run, step_ms=None, status="finished", gpus=8, seconds=600.0, failure=None, **kwargs):
        payload = {"run": run, "status": status}
        if step_ms is not None:
            payload["metrics"] = metrics(step_ms, gpus=gpus, **kwargs)
        if failure is not None:
            payload["failure"] = failure
        ts = self.clock(10)
        self.campaign.charge(run, gpus, seconds, ts=ts)
        return self.campaign.append("result", ts=ts, **payload)

    def baseline(self, runs=3, step=1000.0):
        """The baseline run r001 and its repeats r002.., all finished at ``step`` ms per iteration."""
        self.launch("r001", "baseline", "base")
        self.result("r001", step)
        for index in range(2, runs + 1):
            self.launch("r%03d" % index, "repeat", "base", parent="r001")
            self.result("r%03d" % index, step)

    def gate(self, run, verdict="pass", against="r001", reasons=None):
        payload = {"run": run, "verdict": verdict, "against": against}
        if reasons:
            payload["reasons"] = reasons
        return self.campaign.append("gate", ts=self.clock(), **payload)


def jittered(step_ms, spread, seed):
    """``n`` step times around ``step_ms`` within +-spread/2 (relative); deterministic."""
    rng = random.Random(seed)
    return [round(step_ms * (1 + rng.uniform(-spread / 2, spread / 2)), 1) for _ in range(20)]
