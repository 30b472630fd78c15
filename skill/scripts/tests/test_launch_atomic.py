"""A launch is atomic from the ledger's point of view, tested against the fake Kubernetes API: a backend that
cannot be used (an unknown kube context) or a recipe it refuses leaves no launch row and uses no run id; a
submission the API refuses (403, 422) or that cannot reach it (connection refused) leaves a launch row closed at
once by a ``submit_failed`` result that charges nothing, reserves nothing and counts against no budget; the next
baseline launch is still the baseline, not a repeat."""

from __future__ import annotations

import io
import json
import shutil
import socket
from contextlib import redirect_stderr, redirect_stdout

import pytest
from conftest import DATA
from fake_kube import FakeKube, write_kubeconfig
from factory import settings as make_settings

from attune.campaign import ledger as campaign_mod
from attune import cli
from attune.campaign import runs
from attune.campaign import snapshot as snapshot_mod
from attune.core.errors import CheckFailed, InputError

IMAGE = "registry.example.com/megatron:25.04"


@pytest.fixture
def kube():
    fake = FakeKube()
    yield fake
    fake.close()


def kubeconfig(tmp_path, monkeypatch, server: str):
    path = tmp_path / "kubeconfig"
    write_kubeconfig(path, server)
    monkeypatch.setenv("KUBECONFIG", str(path))


def campaign_on(tmp_path, budget: dict, context: str = "test", image: str = IMAGE):
    baseline = tmp_path / "baseline.yaml"
    shutil.copy(DATA / "recipes" / "megatron_rayjob.yaml", baseline)
    settings = make_settings(ATTUNE_BACKEND="kuberay", ATTUNE_KUBE_CONTEXT=context, ATTUNE_NAMESPACE="ml-tuning",
                             ATTUNE_IMAGE=image, ATTUNE_SHARED_DIR="/mnt/shared", AUTOTUNE_LOG_POD="log-reader",
                             ATTUNE_RUN_PREFIX="alice-llama8b-", ATTUNE_BASELINE_YAML=str(baseline), **budget)
    return campaign_mod.init(tmp_path / "c", settings, "alice-llama8b-atomic"), settings


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rows(campaign, kind):
    return [row for row in campaign.ledger.rows() if row["kind"] == kind]


GPUH = {"AUTOTUNE_GPUH_BUDGET": "100", "AUTOTUNE_BUDGET": ""}
RUNS = {"AUTOTUNE_BUDGET": "5", "AUTOTUNE_GPUH_BUDGET": ""}


@pytest.mark.parametrize("refusal", [403, 422, "connection refused"])
@pytest.mark.parametrize("budget", [GPUH, RUNS], ids=["gpu-hours", "runs"])
def test_a_refused_submission_is_closed_at_once_and_charges_nothing(kube, tmp_path, monkeypatch, refusal, budget):
    if refusal == "connection refused":
        kubeconfig(tmp_path, monkeypatch, "http://127.0.0.1:%d" % closed_port())
    else:
        kubeconfig(tmp_path, monkeypatch, kube.url)
        kube.create_status = refusal
    campaign, settings = campaign_on(tmp_path, budget)
    with pytest.raises(CheckFailed, match="could not be submitted.*closed as submit_failed: nothing is charged"):
        runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)
    (launch,), (result,) = rows(campaign, "launch"), rows(campaign, "result")
    assert launch["run"] == result["run"] == "alice-llama8b-r001" and launch["purpose"] == "baseline"
    assert result["status"] == "failed" and result["failure"]["class"] == "submit_failed"
    assert result["failure"]["source"] == "backend" and result["failure"]["next_step"]
    if refusal != "connection refused":
        assert str(refusal) in result["failure"]["evidence"]
    assert campaign.gpu_log.rows() == [] or all(r["kind"] != "charge" for r in campaign.gpu_log.rows())
    budget_state = snapshot_mod.take(campaign.dir).budget
    assert budget_state.in_flight == () and budget_state.reserved == 0 and budget_state.spent == 0
    assert budget_state.left == budget_state.limit
    # the cluster answers again: the next try is the baseline (not a repeat of a run that never ran)
    kubeconfig(tmp_path, monkeypatch, kube.url)
    kube.create_status = None
    again = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)
    assert again["run"] == "alice-llama8b-r002" and again["purpose"] == "baseline" and "parent" not in again
    ranking = snapshot_mod.take(campaign.dir).ranking
    assert ranking.baseline.first.run == "alice-llama8b-r002"
    assert [run.run for run in ranking.in_flight] == ["alice-llama8b-r002"]
    repeat = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)
    assert repeat["purpose"] == "repeat" and repeat["parent"] == "alice-llama8b-r002"
    # relaunching the run that never ran is refused with the way forward
    with pytest.raises(InputError, match="submission failed"):
        runs.launch_candidate(campaign, settings, "alice-llama8b-r001", expected_gpu_hours=3.0)


def test_an_unknown_context_leaves_no_launch_row_and_no_run_id(kube, tmp_path, monkeypatch):
    kubeconfig(tmp_path, monkeypatch, kube.url)
    campaign, settings = campaign_on(tmp_path, GPUH, context="no-such-context")
    before = campaign.ledger.rows()
    with pytest.raises(InputError, match="ATTUNE_KUBE_CONTEXT=no-such-context"):
        runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)
    assert campaign.ledger.rows() == before
    assert not (campaign.dir / "runs").exists() or list((campaign.dir / "runs").iterdir()) == []
    assert kube.requests == []


def test_a_recipe_the_backend_refuses_leaves_no_launch_row(kube, tmp_path, monkeypatch):
    kubeconfig(tmp_path, monkeypatch, kube.url)
    campaign, settings = campaign_on(tmp_path, GPUH, image="registry.example.com/other:1")
    with pytest.raises(InputError, match="other than ATTUNE_IMAGE"):
        runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)
    assert rows(campaign, "launch") == [] and kube.requests == []


def test_the_cli_says_so_in_one_line_and_exits_1(kube, tmp_path, monkeypatch):
    kubeconfig(tmp_path, monkeypatch, kube.url)
    kube.create_status = 403
    campaign, settings = campaign_on(tmp_path, GPUH)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["launch", "--baseline", "--expected-gpu-hours", "3", "--campaign", str(campaign.dir)])
    assert code == 1 and len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
    assert "submit_failed" in err.getvalue() and "Traceback" not in err.getvalue()
    with redirect_stdout(out), redirect_stderr(err):
        assert cli.main(["status", "--json", "--campaign", str(campaign.dir)]) == 0
    status = json.loads(out.getvalue()[out.getvalue().index("{"):])
    assert status["in_flight"] == [] and status["budget"]["reserved"] == 0


@pytest.mark.parametrize("limit", [1, 2])
def test_a_launch_past_the_runs_allowed_in_flight_is_refused_before_anything_is_written(kube, tmp_path, monkeypatch,
                                                                                        limit):
    """ATTUNE_MAX_IN_FLIGHT (default 1) is the most runs in flight at once, whoever launches them: a launch past it
    is refused (exit 1) naming the runs that hold the places, leaves no launch row and uses no run id; a run
    finalized gives its place back, and a submission the cluster refused never held one."""
    kubeconfig(tmp_path, monkeypatch, kube.url)
    campaign, settings = campaign_on(tmp_path, dict(GPUH, ATTUNE_MAX_IN_FLIGHT=str(limit)))
    kube.create_status = 403  # refused: closed at once, holding no place
    with pytest.raises(CheckFailed, match="could not be submitted"):
        runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)
    kube.create_status = None
    held = [runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["run"] for _ in range(limit)]
    before = campaign.ledger.rows()
    run_dirs = sorted(path.name for path in (campaign.dir / "runs").iterdir())
    with pytest.raises(CheckFailed) as refused:
        runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)
    message = str(refused.value)
    assert "ATTUNE_MAX_IN_FLIGHT is %d" % limit in message and all(run in message for run in held)
    assert campaign.ledger.rows() == before
    assert sorted(path.name for path in (campaign.dir / "runs").iterdir()) == run_dirs
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["launch", "--baseline", "--campaign", str(campaign.dir), "--expected-gpu-hours", "3"])
    assert code == 1 and "ATTUNE_MAX_IN_FLIGHT is %d" % limit in err.getvalue() and campaign.ledger.rows() == before
    runs.teardown(campaign, settings, held[0])  # a run finalized gives its place back
    runs.finalize(campaign, settings, held[0])
    assert held[0] not in snapshot_mod.take(campaign.dir).budget.in_flight
    assert runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["purpose"] == "repeat"
