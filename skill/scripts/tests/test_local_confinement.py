"""A local run runs confined (ATTUNE_LOCAL_CONFINE=on, the default), tested as an attacker would, by effect: a run's
program tries to write outside its own folders (the user's home, the campaign, its own log, local.json, exit.json),
to forge its log, to reach a port listening on the host's loopback and to leave processes behind, and none of it
has any effect; a normal run still succeeds and is scored as before. Where bubblewrap cannot make a sandbox, a
launch is refused, naming what failed and the fix, unless the campaign set ATTUNE_LOCAL_CONFINE=off."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time

import pytest
from conftest import DATA
from factory import local_campaign, wait

from attune.campaign import localrun, runs
from attune.core import confinement, settings as settings_mod
from attune.core.errors import CheckFailed, SettingsError

RECIPE = (DATA / "recipes" / "local_fake_megatron.yaml").read_text()
FAKE = DATA / "fake_megatron.py"
UNAVAILABLE = confinement.run_sandbox_unavailable(shutil.which("bwrap"), localrun.sandbox_argv)
needs_bwrap = pytest.mark.skipif(UNAVAILABLE is not None, reason="bubblewrap cannot make a sandbox on this host: %s "
                                 "(fix: %s)" % UNAVAILABLE if UNAVAILABLE else "")

# The run's program: each attempt prints what happened to it; everything it prints is also kept in work/printed.txt
# (which it may write), so that the test can compare the log with what the program printed
ATTACK = r'''
import os, socket, subprocess, sys
run_dir = os.environ["ATTUNE_LOCAL_RUN"]
campaign = os.path.dirname(os.path.dirname(run_dir))
printed = open(os.path.join(run_dir, "work", "printed.txt"), "w")

def say(text):
    print(text, flush=True)
    printed.write(text + "\n")
    printed.flush()

say("early line the program printed")
FORGED = (" [2026-11-02 09:00:01] iteration       20/      20 | consumed samples: 160 | elapsed time per iteration "
          "(ms): 1.0 | global batch size:     8 | lm loss: 1.0E+00 | FORGED")

def attempt(name, action):
    try:
        action()
        say("attempt %s: done" % name)
    except Exception as exc:
        say("attempt %s: blocked (%s)" % (name, type(exc).__name__))

def write(path, mode="w", text="canary"):
    with open(path, mode) as handle:
        handle.write(text)

attempt("home", lambda: write(os.path.join(os.environ["HOME"], "canary")))
attempt("bashrc", lambda: write(os.path.join(os.environ["HOME"], ".bashrc"), "a", "echo owned\n"))
attempt("campaign", lambda: write(os.path.join(campaign, "canary")))
attempt("ledger", lambda: write(os.path.join(campaign, "ledger.jsonl"), "a", FORGED + "\n"))
attempt("log-append", lambda: write(os.path.join(run_dir, "log.txt"), "a", FORGED + "\n"))
attempt("log-truncate", lambda: write(os.path.join(run_dir, "log.txt"), "w", FORGED + "\n"))
attempt("local.json", lambda: write(os.path.join(run_dir, "local.json"), "w", "{}"))
attempt("exit.json", lambda: write(os.path.join(run_dir, "exit.json"), "w", '{"exit_code": 0}'))
attempt("rename", lambda: os.rename(os.path.join(run_dir, "work", "printed.txt"), os.path.join(run_dir, "log.txt")))
attempt("host-tmp", lambda: write(os.path.join(os.environ["CANARY_TMP"], "canary")))
attempt("stdout-seek", lambda: os.lseek(1, 0, os.SEEK_SET))
attempt("stdout-truncate", lambda: os.ftruncate(1, 0))

def through_proc():  # any open file of any process it can see that is the log
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            for fd in os.listdir("/proc/%s/fd" % pid):
                link = "/proc/%s/fd/%s" % (pid, fd)
                if os.path.realpath(link) == os.path.join(run_dir, "log.txt"):
                    write(link, "a", FORGED + "\n")
                    return
    raise LookupError("no open log.txt in sight")
attempt("proc-fd", through_proc)

def connect():
    with socket.create_connection(("127.0.0.1", int(os.environ["CANARY_PORT"])), timeout=3):
        pass
attempt("host-loopback", connect)
attempt("tmpdir", lambda: write(os.path.join(os.environ["TMPDIR"], "scratch")))
attempt("work", lambda: write(os.path.join(run_dir, "work", "output")))
# left behind: one process in a session of its own, one that would write into work/ two seconds from now
subprocess.Popen(["sleep", "301"], start_new_session=True)
subprocess.Popen([sys.executable, "-c", "import os, time; time.sleep(2); open(os.path.join(%r, 'work', 'late'), 'w')"
                  % run_dir], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
say("last line the program printed")
'''


def _bin_with(tmp_path, **programs):
    """A folder for PATH with bash and the given programs (name: shell script text)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "bash").symlink_to(shutil.which("bash"))
    for name, text in programs.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return str(folder)


@needs_bwrap
def test_a_normal_run_is_confined_and_scored_as_before(tmp_path):
    made = local_campaign(tmp_path, RECIPE.format(python=sys.executable, script=FAKE), "conf-", "conf-test")
    campaign, settings = next(made)
    try:
        row = runs.launch_baseline(campaign, settings)
        run_dir = campaign.run_dir(row["run"])
        spec = json.loads((run_dir / "local.json").read_text())
        assert spec["confined"] is True and spec["cwd"] == str(run_dir.resolve() / "work")
        sandbox = spec["sandbox"]
        assert os.path.basename(sandbox[0]) == "bwrap" and sandbox[-1] == "--"
        for flag in ("--die-with-parent", "--unshare-net", "--unshare-pid", "--unshare-ipc"):
            assert flag in sandbox
        assert sandbox[sandbox.index("--ro-bind") + 1:sandbox.index("--ro-bind") + 3] == ["/", "/"]
        binds = [sandbox[i + 1] for i, word in enumerate(sandbox) if word == "--bind"]
        assert binds == [str(run_dir.resolve() / name) for name in ("work", "pod_hooks", "tmp")]
        wait(campaign, settings, row["run"], ("succeeded",))
        result = runs.finalize(campaign, settings, row["run"])
        assert result["status"] == "finished" and result["metrics"]["iter"] == list(range(1, 21))
        assert result["metrics"]["step_ms"] == [500.0 + it for it in range(1, 21)]
        lines = (run_dir / "log.txt").read_text().splitlines()
        assert lines[0].startswith("argv: ") and len(lines) == 21  # what the program printed, nothing else
        assert not (run_dir / "tmp").exists()  # the run's temporary folder goes when it ends
    finally:
        for _ in made:
            pass


@needs_bwrap
def test_a_run_writes_reaches_and_leaves_behind_nothing_outside_its_own_folders(tmp_path, monkeypatch):
    home, host_tmp = tmp_path / "home", tmp_path / "host-tmp"
    home.mkdir()
    host_tmp.mkdir()
    (home / ".bashrc").write_text("# the user's\n")
    monkeypatch.setenv("HOME", str(home))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    monkeypatch.setenv("CANARY_PORT", str(listener.getsockname()[1]))
    monkeypatch.setenv("CANARY_TMP", str(host_tmp))
    attack = tmp_path / "attack.py"
    attack.write_text(ATTACK)
    made = local_campaign(tmp_path, RECIPE.format(python=sys.executable, script=attack), "conf-", "conf-test")
    campaign, settings = next(made)
    try:
        ledger_before = (campaign.dir / "ledger.jsonl").read_bytes()
        row = runs.launch_baseline(campaign, settings)
        run_dir = campaign.run_dir(row["run"])
        local_json = (run_dir / "local.json").read_bytes()
        wait(campaign, settings, row["run"], ("succeeded", "failed"))
        log = (run_dir / "log.txt").read_text()
        assert runs.backends._marked(run_dir) == [], "a process of the run outlived it"
        time.sleep(2.5)
        # what it printed, and only that: nothing forged, nothing rewritten
        assert log == (run_dir / "work" / "printed.txt").read_text(), log
        assert log.startswith("early line the program printed\n") and "FORGED" not in log
        for name in ("home", "bashrc", "campaign", "ledger", "log-append", "log-truncate", "local.json", "exit.json",
                     "rename", "host-tmp", "stdout-seek", "stdout-truncate", "proc-fd", "host-loopback"):
            assert "attempt %s: blocked" % name in log, log
        assert "attempt tmpdir: done" in log and "attempt work: done" in log  # its own folders
        assert (run_dir / "work" / "output").read_text() == "canary"
        assert not (home / "canary").exists() and (home / ".bashrc").read_text() == "# the user's\n"
        assert not (campaign.dir / "canary").exists() and not list(host_tmp.iterdir())
        assert b"FORGED" not in (campaign.dir / "ledger.jsonl").read_bytes()
        assert (campaign.dir / "ledger.jsonl").read_bytes().startswith(ledger_before)
        assert (run_dir / "local.json").read_bytes() == local_json
        assert json.loads((run_dir / "exit.json").read_text())["exit_code"] == 0
        assert not (run_dir / "work" / "late").exists(), "a process it left behind ran on"
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection reached the host's loopback
        result = runs.finalize(campaign, settings, row["run"])
        assert result["status"] != "finished" and not (result.get("metrics") or {}).get("iter")
    finally:
        listener.close()
        for _ in made:
            pass


def test_a_launch_is_refused_where_bwrap_is_not_on_path(tmp_path, monkeypatch):
    made = local_campaign(tmp_path, RECIPE.format(python=sys.executable, script=FAKE), "conf-", "conf-test")
    campaign, settings = next(made)
    monkeypatch.setenv("PATH", _bin_with(tmp_path))
    with pytest.raises(CheckFailed) as refused:
        runs.launch_baseline(campaign, settings)
    message = str(refused.value)
    assert "local runs run confined (ATTUNE_LOCAL_CONFINE=on), and bubblewrap (bwrap) is not on PATH" in message
    assert "apt-get install bubblewrap" in message and "ATTUNE_LOCAL_CONFINE=off" in message
    assert [row["kind"] for row in campaign.ledger.rows()] == ["campaign"]  # nothing written, no run id used
    assert not (campaign.dir / "runs").exists() or not list((campaign.dir / "runs").iterdir())


def test_a_launch_is_refused_where_bwrap_cannot_make_a_sandbox(tmp_path, monkeypatch):
    made = local_campaign(tmp_path, RECIPE.format(python=sys.executable, script=FAKE), "conf-", "conf-test")
    campaign, settings = next(made)
    failing = "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    monkeypatch.setenv("PATH", _bin_with(tmp_path, bwrap=failing))
    with pytest.raises(CheckFailed, match=r"bwrap cannot make a sandbox here \(bwrap: setting up uid map: Permission "
                                          r"denied\)\. Fix: allow unprivileged user namespaces"):
        runs.launch_baseline(campaign, settings)
    assert [row["kind"] for row in campaign.ledger.rows()] == ["campaign"]


def test_off_runs_unconfined_on_purpose_and_says_so(tmp_path, monkeypatch):
    made = local_campaign(tmp_path, RECIPE.format(python=sys.executable, script=FAKE), "conf-", "conf-test",
                          ATTUNE_LOCAL_CONFINE="off")
    campaign, settings = next(made)
    try:
        monkeypatch.setenv("PATH", _bin_with(tmp_path))  # no bwrap: not needed
        row = runs.launch_baseline(campaign, settings)
        run_dir = campaign.run_dir(row["run"])
        spec = json.loads((run_dir / "local.json").read_text())
        assert spec["confined"] is False and "sandbox" not in spec and spec["cwd"] == str(run_dir.resolve() / "work")
        wait(campaign, settings, row["run"], ("succeeded",))
        assert runs.finalize(campaign, settings, row["run"])["metrics"]["iter"] == list(range(1, 21))
    finally:
        for _ in made:
            pass


def test_a_confined_run_whose_sandbox_cannot_start_fails_and_never_runs_unconfined(tmp_path):
    for name, sandbox in (("missing", [str(tmp_path / "no-bwrap"), "--"]), ("none", None)):
        run_dir = tmp_path / name
        work = run_dir / "work"
        spec = {"command": "touch ran", "env": {}, "unset": [], "cwd": str(work), "confined": True,
                "writable": [str(work)], "tmp": str(run_dir / "tmp"), "sandbox": sandbox}
        run_dir.mkdir()
        (run_dir / "local.json").write_text(json.dumps(spec))
        assert localrun.main([str(run_dir)]) == 0
        assert json.loads((run_dir / "exit.json").read_text())["exit_code"] == 127
        assert not (work / "ran").exists()
        assert "attune-local: the job could not start" in (run_dir / "log.txt").read_text()


def test_the_check_names_linux_where_there_is_no_bubblewrap():
    what, fix = confinement.run_sandbox_unavailable("/usr/bin/bwrap", localrun.sandbox_argv, platform="darwin")
    assert "needs bubblewrap, which runs on Linux, not on darwin" in what and "Linux" in fix


def test_the_setting_is_on_or_off():
    assert settings_mod.load(dict(_required(), ATTUNE_LOCAL_CONFINE="")).local_confine == "on"
    assert settings_mod.load(dict(_required(), ATTUNE_LOCAL_CONFINE="off")).local_confine == "off"
    with pytest.raises(SettingsError, match="ATTUNE_LOCAL_CONFINE='maybe': must be one of on, off"):
        settings_mod.load(dict(_required(), ATTUNE_LOCAL_CONFINE="maybe"))


def _required() -> dict:
    return {"ATTUNE_RUN_PREFIX": "conf-", "ATTUNE_BASELINE_YAML": "baseline.yaml", "ATTUNE_BACKEND": "local",
            "AUTOTUNE_BUDGET": "20"}
