"""One session of the real Claude Code CLI (pinned 2.1.332), driven by a scripted model on loopback, running a table of
tool calls in a prepared campaign under the campaign's own settings (its sandbox, its permission rules, the
PreToolUse guard), with what every call changed taken as it returns. The effect tests (``test_sandbox_effects.py``,
``test_verb_boundary.py``) run their tables through it and judge each call by what it did.

The agent's HOME holds the files an attacker wants (shell start-up files, Claude Code's settings, a kube config and
cloud credentials with secrets in them); the kube config points at a fake Kubernetes API that logs every request.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from fake_anthropic import FakeAnthropic, text, tool
from test_e2e_claude import claude_bin
from test_launcher import launch, setup

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "harness" / "hooks"))
sys.path.insert(0, str(REPO / "skill" / "scripts" / "tests"))

import campaign_files  # noqa: E402
from fake_kube import FakeKube, write_kubeconfig  # noqa: E402

API_KEY = "sk-ant-sandbox-table-secret-4711"
AWS_SECRET = "aws-sandbox-table-secret-0815"
KUBE_TOKEN = "kube-token-sandbox-table-secret-2718"
HOME_FILES = (".claude/settings.json", ".bashrc", ".profile", ".kube/config", ".aws/credentials")
CLI_BOOKKEEPING = ".claude/.cc-writes"  # written by the CLI itself (outside the sandbox), never read as settings


def sha(path: Path):
    try:
        if path.is_symlink():
            return "symlink:" + os.readlink(path)
        if path.is_dir():
            return "dir"
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        return "error: %s" % exc.__class__.__name__


def _walk(out: dict, root: Path, label: str, skip=()) -> None:
    out[label] = sha(root) if os.path.lexists(root) else "missing"
    if root.is_dir() and not root.is_symlink():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [name for name in dirnames if name != "__pycache__"]
            for name in dirnames + filenames:
                full = Path(dirpath) / name
                rel = "%s/%s" % (label, full.relative_to(root))
                if rel not in skip:
                    out[rel] = sha(full)


def snapshot(camp: Path, home: Path, cfg: Path, entries=None, extra=()) -> dict:
    """Every protected path of the campaign (``entries``, default all of ``campaign_files.PROTECTED``, present or
    not, trees walked), the agent's files outside it, and the ``extra`` paths (trees walked)."""
    out = {}
    for entry in campaign_files.PROTECTED if entries is None else entries:
        _walk(out, camp / entry.rstrip("/"), entry.rstrip("/"), skip=(CLI_BOOKKEEPING,))
    for rel in HOME_FILES:
        out["~/" + rel] = sha(home / rel) if os.path.lexists(home / rel) else "missing"
    out["$CLAUDE_CONFIG_DIR/settings.json"] = sha(cfg / "settings.json") if (cfg / "settings.json").exists() \
        else "missing"
    for path in extra:
        _walk(out, Path(path), str(path))
    return out


def fill(value, names):
    if isinstance(value, str):
        for key, replacement in names.items():
            value = value.replace("{%s}" % key, replacement)
        return value
    if isinstance(value, dict):
        return {k: fill(v, names) for k, v in value.items()}
    return value


def result_text(body: dict) -> str:
    """The tool result the last message of a request carries, as text."""
    last = body["messages"][-1]["content"]
    parts = []
    for block in last if isinstance(last, list) else []:
        if block.get("type") == "tool_result":
            content = block.get("content")
            parts.append(content if isinstance(content, str) else json.dumps(content))
    return "\n".join(parts)


@dataclasses.dataclass
class Campaign:
    """A prepared campaign and the agent's world around it."""
    tmp: Path
    camp: Path
    home: Path
    cfg: Path
    env: dict  # the launcher's environment
    kube: FakeKube
    names: dict  # placeholders of the table's calls

    def wrapper(self, *args, check=True) -> subprocess.CompletedProcess:
        """``attune ARGS`` as the agent's Bash runs it (the campaign's wrapper), from the campaign directory."""
        done = subprocess.run([str(self.camp / ".attune" / "bin" / "attune")] + list(args), cwd=str(self.camp),
                              env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert not check or done.returncode == 0, (args, done.stderr.decode()[-2000:])
        return done


def prepare(tmp_path: Path, baseline_inside: bool = False) -> Campaign:
    """A campaign prepared by the launcher on the local backend, its agent's HOME and a fake Kubernetes API.
    ``baseline_inside``: the settings name a baseline recipe in the campaign's top level (as the demo's do)."""
    directory, env = setup(tmp_path)
    home, cfg, tmp = tmp_path / "home", tmp_path / "cfg", tmp_path / "tmp"
    for folder in (home, cfg, tmp, home / ".claude", home / ".aws"):
        folder.mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(json.dumps({"theme": "dark"}))
    (home / ".bashrc").write_text("# the agent's HOME\n")
    (home / ".profile").write_text("# the agent's profile\n")
    (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key = %s\n" % AWS_SECRET)
    kube = FakeKube()
    (home / ".kube").mkdir()
    config = write_kubeconfig(home / ".kube" / "config", kube.url)
    config.write_text(config.read_text().replace("not-a-secret", KUBE_TOKEN))
    if baseline_inside:
        directory.mkdir(parents=True)
        inside = directory / "baseline.yaml"
        inside.write_text(Path(env["ATTUNE_BASELINE_YAML"]).read_text())
        env["ATTUNE_BASELINE_YAML"] = str(inside)
    env.update({"HOME": str(home), "CLAUDE_CONFIG_DIR": str(cfg), "TMPDIR": str(tmp),
                "KUBECONFIG": str(home / ".kube" / "config")})
    code, out, err = launch(directory, env, "--prepare")
    assert code == 0, err
    camp = directory.resolve()
    names = {"camp": str(camp), "home": str(home), "cfg": str(cfg), "kube": kube.url, "tmp": str(tmp),
             "port": kube.url.rsplit(":", 1)[1], "py": sys.executable}
    return Campaign(tmp_path, camp, home, cfg, env, kube, names)


@dataclasses.dataclass
class Outcome:
    calls: list  # (tool name, its filled input)
    results: dict  # call index -> the tool result the model got
    before: dict  # the snapshot before the first call
    after: dict  # call index -> the snapshot as that call returned
    kube_seen: dict  # call index -> how many API requests the fake server had logged by then
    requests: list  # every request the CLI sent the model
    elapsed: float


def run_table(c: Campaign, entries: list, take_snapshot, settings_edit=None) -> Outcome:
    """Run ``entries`` (each with ``tool`` and ``tool_input``) as one session of the real CLI in ``c.camp`` with the
    campaign's Claude Code settings (``settings_edit(settings)`` may change a copy first); ``take_snapshot()`` is
    called as the CLI asks for its first call and as each call returns."""
    binary = claude_bin()
    settings = json.loads((c.camp / ".attune" / "claude_settings.json").read_text())
    del settings["hooks"]["Stop"]  # the campaign is not over: the Stop hook would keep the session going
    if settings_edit is not None:
        settings_edit(settings)
    settings_file = c.tmp / "settings.json"
    settings_file.write_text(json.dumps(settings))
    calls = [(entry.tool, fill(entry.tool_input, c.names)) for entry in entries]
    script = [[tool(name, **tool_input)] for name, tool_input in calls] + [[text("The table is done.")]]
    after, kube_seen, start = {}, {}, {}

    def on_request(number, body):
        if number == 0:  # the CLI has started (and written its own files) and no call has run yet
            start["before"] = take_snapshot()
        if number >= 1:
            after[number - 1] = take_snapshot()
            kube_seen[number - 1] = len(c.kube.requests)

    with FakeAnthropic(script, on_request=on_request) as api:
        agent_env = {"PATH": "%s:%s" % (c.camp / ".attune" / "bin", c.env["PATH"]), "HOME": str(c.home),
                     "TMPDIR": c.names["tmp"], "CLAUDE_CONFIG_DIR": str(c.cfg), "ANTHROPIC_BASE_URL": api.url,
                     "ANTHROPIC_API_KEY": API_KEY, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                     "CLAUDE_CODE_MAX_RETRIES": "0", "ATTUNE_CAMPAIGN_DIR": str(c.camp),
                     "KUBECONFIG": str(c.home / ".kube" / "config"), "PYTHONDONTWRITEBYTECODE": "1",
                     "XDG_STATE_HOME": c.env.get("XDG_STATE_HOME", "")}
        started = time.monotonic()
        proc = subprocess.run([str(binary), "-p", "Run the table.", "--output-format", "json", "--settings",
                               str(settings_file), "--model", "fake-model"], cwd=str(c.camp), env=agent_env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=1500)
        elapsed = time.monotonic() - started
    assert proc.returncode == 0, (proc.stdout.decode()[-2000:], proc.stderr.decode()[-2000:])
    assert len(api.requests) == len(script), "one request per call, then the end (%d requests, %d calls)" % (
        len(api.requests), len(calls))
    results = {i: result_text(api.requests[i + 1]) for i in range(len(calls))}
    return Outcome(calls, results, start["before"], after, kube_seen, api.requests, elapsed)


def changes(outcome: Outcome, entries: list, ignore=lambda key: False) -> list:
    """One line for each call that changed a snapshotted path (each change reported once), keys for which
    ``ignore(key)`` holds left out."""
    lines, before = [], outcome.before
    for i, entry in enumerate(entries):
        diff = sorted(k for k in set(before) | set(outcome.after[i])
                      if before.get(k) != outcome.after[i].get(k) and not ignore(k))
        if diff:
            lines.append("%d %s: %s changed %s; result: %s" % (i, entry.cls, outcome.calls[i][1], diff,
                                                               outcome.results[i][:300]))
        before = outcome.after[i]
    return lines
