"""The hooks in harness/hooks/ must run on Python 3.7: Claude Code runs them with whatever python3
the agent's host has, and a hook that fails to start (a SyntaxError, an AttributeError on a newer
str method) exits non-zero, which Claude Code treats as a non-blocking error: the tool call goes
through unchecked.

The project's own environment is Python 3.10+ and no Python 3.7 interpreter is installed with it,
so a minimum-version checker stands in: vermin (a test dependency) parses every .py in
harness/hooks/ and harness/hooks/guard/ and reports each feature newer than 3.7 (walrus,
``f"{x=}"``, ``dict | dict``, ``str.removeprefix``, ``list[str]`` annotations evaluated at run
time, ...). ``--eval-annotations`` makes it count annotations as evaluated, which is how 3.7
treats them without ``from __future__ import annotations``.

Where a 3.7 interpreter does exist on the machine (``python3.7`` on PATH, or a pyenv 3.7), the
test also byte-compiles the hooks with it and runs the guard's whole case table
(guard_cases.py) through it, expecting the same decisions as on the project's Python; without one
those checks are skipped.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
HOOKS = os.path.abspath(os.path.join(HERE, os.pardir, "hooks"))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import guard_cases  # noqa: E402

SCRIPTS = os.path.abspath(os.path.join(HERE, os.pardir, os.pardir, "skill", "scripts"))
# what the hooks import of the skill: its loader, the package and its kernel's state, chained log (and the safe
# writer it writes through) and schema
KERNEL = ["attune.py", "__init__.py", "core/__init__.py", "core/state.py", "core/chainlog.py", "core/schema.py",
          "core/errors.py", "core/files.py"]
HOOK_FILES = sorted(glob.glob(os.path.join(HOOKS, "*.py")) + glob.glob(os.path.join(HOOKS, "guard", "*.py")))
HOOK_IDS = [os.path.relpath(path, HOOKS).replace(os.sep, "/") for path in HOOK_FILES]
HOOK_FILES += [os.path.join(SCRIPTS, name) for name in KERNEL]
HOOK_IDS += ["skill/scripts/" + name for name in KERNEL]
# what the Stop hook imports of the harness: the integrity check, its key and the user's Claude Code settings
HARNESS_FILES = ["integrity.py", "integrity_files.py", "integrity_logs.py", "integrity_key.py", "user_settings.py"]
HOOK_FILES += [os.path.join(os.path.dirname(HOOKS), name) for name in HARNESS_FILES]
HOOK_IDS += ["harness/" + name for name in HARNESS_FILES]
VERMIN_ARGS = ["--target=3.7-", "--violations", "--eval-annotations", "--no-tips", "-q", "--no-config-file"]


def _vermin():
    """The vermin command: next to this interpreter (a venv), else on PATH."""
    local = os.path.join(os.path.dirname(sys.executable), "vermin")
    if os.path.exists(local):
        return [local]
    found = shutil.which("vermin")
    if found:
        return [found]
    pytest.fail("vermin is not installed; install the test extra: pip install -e '.[test]' (or pip install vermin)")


def _python37():
    candidates = [shutil.which("python3.7")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.7*/bin/python3.7")))
    for candidate in candidates:
        if not candidate:
            continue
        try:
            out = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0 and out.stdout.decode().strip() == "(3, 7)":
            return candidate
    return None


def test_there_are_hooks():
    assert "pre_tool_use.py" in HOOK_IDS and "campaign_files.py" in HOOK_IDS and "guard/__init__.py" in HOOK_IDS


@pytest.mark.parametrize("path", HOOK_FILES, ids=HOOK_IDS)
def test_hook_needs_no_newer_python_than_3_7(path):
    proc = subprocess.run(_vermin() + VERMIN_ARGS + [path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=120)
    report = proc.stdout.decode("utf-8", "replace").strip()
    assert proc.returncode == 0 and report == "", "vermin found features newer than 3.7 in %s:\n%s" % (path, report)


def test_vermin_catches_what_it_stands_in_for(tmp_path):
    """The check is not vacuous: features newer than 3.7 fail it."""
    bad = tmp_path / "bad.py"
    bad.write_text('import sys\nif (n := len(sys.argv)):\n    print(f"{n=}")\nprint("ab".removeprefix("a"))\n'
                   'a = {} | {"k": 1}\ndef f(x: list[str]) -> None:\n    pass\n')
    proc = subprocess.run(_vermin() + VERMIN_ARGS + [str(bad)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=120)
    report = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode != 0
    for feature in ("named expressions", "self-documenting f-strings", "removeprefix", "dict union", "list[..]"):
        assert feature in report, report


_DRIVER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import pre_tool_use
data = json.load(sys.stdin)
out = [list(pre_tool_use.decide(item["event"], data["camp"], item["settings"])) for item in data["cases"]]
json.dump(out, sys.stdout)
"""


def test_hooks_on_a_real_python_3_7_when_there_is_one(tmp_path):
    python37 = _python37()
    if python37 is None:
        pytest.skip("no Python 3.7 interpreter here; the vermin check stands in")
    for path in HOOK_FILES:
        proc = subprocess.run([python37, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])",
                               path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        assert proc.returncode == 0, proc.stdout.decode()
    dirs = guard_cases.build(tmp_path)
    cases = guard_cases.CASES
    payload = {"camp": dirs["camp"], "cases": [
        {"event": guard_cases.event(c.tool, guard_cases.fill(c.tool_input, dirs), guard_cases.cwd_of(c.cwd, dirs)),
         "settings": guard_cases.settings_for(c)} for c in cases]}
    proc = subprocess.run([python37, "-c", _DRIVER, HOOKS], input=json.dumps(payload).encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    results = json.loads(proc.stdout.decode())
    wrong = ["%s: got %s (%s)" % (guard_cases.case_id(c), decision, reason[:120])
             for c, (decision, reason) in zip(cases, results)
             if decision != c.expect or (c.expect == "deny" and c.why not in reason)]
    assert not wrong, "\n".join(wrong)
    event = guard_cases.event("Bash", {"command": "attune status --json"}, dirs["camp"])
    env = dict(os.environ, ATTUNE_CAMPAIGN_DIR=dirs["camp"])
    proc = subprocess.run([python37, os.path.join(HOOKS, "pre_tool_use.py")], input=json.dumps(event).encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=60)
    assert proc.returncode == 0
    assert json.loads(proc.stdout.decode())["hookSpecificOutput"]["permissionDecision"] == "allow"


def test_the_stop_hook_decides_on_a_real_python_3_7_when_there_is_one(tmp_path):
    """The Stop hook loads the kernel's state rules from the skill beside it and decides on Python 3.7."""
    python37 = _python37()
    if python37 is None:
        pytest.skip("no Python 3.7 interpreter here; the vermin check stands in")
    camp = tmp_path / "camp"
    (camp / ".attune").mkdir(parents=True)
    (camp / ".attune" / "settings.env").write_text("AUTOTUNE_GPUH_BUDGET=2.0\n")
    rows = [{"kind": "launch", "seq": 1, "run": "r001", "purpose": "baseline", "ts": "t1", "expected_gpu_hours": 0.5},
            {"kind": "launch", "seq": 2, "run": "r002", "purpose": "candidate", "ts": "t2", "expected_gpu_hours": 0.25},
            {"kind": "result", "seq": 3, "run": "r001", "status": "finished"}]
    (camp / "ledger.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (camp / "gpu_hours.jsonl").write_text(json.dumps({"kind": "charge", "run": "r001", "gpu_seconds": 1800}) + "\n")
    env = dict(os.environ, ATTUNE_CAMPAIGN_DIR=str(camp))
    proc = subprocess.run([python37, os.path.join(HOOKS, "stop.py")], input=b"{}", stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout.decode())
    assert out["decision"] == "block", out
    assert "Budget left: 1.25 of 2.00 GPU-hours (0.25 reserved by runs in flight)." in out["reason"], out
    assert "finalize the runs in flight (r002)" in out["reason"], out
