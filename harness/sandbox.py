"""The agent's operating-system sandbox: what Claude Code's Bash sandbox lets a campaign's agent touch.

Claude Code runs every Bash command of the agent, and its subprocesses, inside its sandbox
(bubblewrap and socat on Linux, Seatbelt on macOS). The launcher writes the settings here into the
campaign's Claude Code settings file (``--settings``, a tier whose sandbox settings a project file
cannot widen):

* on and required: ``failIfUnavailable`` (no session starts without it), no unsandboxed fallback
  (``allowUnsandboxedCommands: false``, so a command's ``dangerouslyDisableSandbox`` is ignored);
* writes: Claude Code lets a sandboxed command write its working directory (the campaign) and its
  temp dir; every protected path of the campaign (``campaign_files.PROTECTED``, plus ``.claude/``,
  ``CLAUDE.md`` and ``.mcp.json``) is denied, whether or not it exists yet, and ``notes.md`` and
  ``scratch/`` are allowed. Other new files at the campaign's top level are neither records nor read
  by any verb;
* reads denied: kube configs (``~/.kube``, every file ``KUBECONFIG`` names), cloud and registry
  credentials, the service-account token, and Claude Code's own settings and transcripts;
  credential variables are unset for sandboxed commands;
* network: none (no domain allowed), so the Kubernetes API server, Ray and the log pod are out of
  reach from inside, loopback included;
* one command leaves it: ``attune`` (``excludedCommands``), the campaign's wrapper in ``.attune/bin``
  (first on the agent's ``PATH``), which runs the CLI from the campaign's read-only skill copy with
  this Python in isolated mode, on this campaign only. Claude Code takes a call out of the sandbox
  only when every command in it matches; the PreToolUse guard further requires the call to be exactly
  one ``attune VERB ...`` with literal arguments (``guard/verbs.py``).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "hooks"))

import campaign_files  # noqa: E402

VERB = "attune"
WRAPPER = campaign_files.STATE + "/bin/" + VERB
# protected besides campaign_files.PROTECTED: what Claude Code itself reads as instructions or settings
AGENT_CONFIG = (".claude/", "CLAUDE.md", ".mcp.json")
FREE_WRITE = ("notes.md", "scratch/")
# read-denied below HOME: kube configs, cloud and registry credentials, keys, Claude Code's settings
HOME_SECRETS = (".kube", ".aws", ".azure", ".config/gcloud", ".docker", ".ssh", ".gnupg", ".netrc",
                ".git-credentials", ".config/gh", ".claude", ".claude.json")
SYSTEM_SECRETS = ("/var/run/secrets", "/run/secrets")
CREDENTIAL_VARS = ("KUBECONFIG", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
                   "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS",
                   "AZURE_CLIENT_SECRET", "GITHUB_TOKEN", "GH_TOKEN", "HF_TOKEN", "WANDB_API_KEY")


def protected_paths(directory: Path) -> list:
    """Absolute paths no sandboxed command may write (trees without their trailing slash)."""
    out = []
    for entry in campaign_files.PROTECTED + AGENT_CONFIG:
        path = str(directory / entry.rstrip("/"))
        if path not in out:
            out.append(path)
    return out


def secret_paths(env) -> list:
    """Absolute paths no sandboxed command may read."""
    home = env.get("HOME") or os.path.expanduser("~")
    out = [os.path.join(home, rel) for rel in HOME_SECRETS]
    for name in ("CLAUDE_CONFIG_DIR",):
        if env.get(name):
            out.append(os.path.abspath(env[name]))
    for entry in (env.get("KUBECONFIG") or "").split(os.pathsep):
        if entry:
            out.append(os.path.abspath(os.path.expanduser(entry)))
    out += list(SYSTEM_SECRETS)
    seen = []
    for path in out:
        if path not in seen:
            seen.append(path)
    return seen


def settings(directory: Path, env=None) -> dict:
    """The ``sandbox`` object of the campaign's Claude Code settings."""
    env = os.environ if env is None else env
    return {
        "enabled": True,
        "failIfUnavailable": True,
        "allowUnsandboxedCommands": False,
        "autoAllowBashIfSandboxed": True,
        "excludedCommands": ["%s:*" % VERB],
        "filesystem": {
            "allowWrite": [str(directory / entry.rstrip("/")) for entry in FREE_WRITE],
            "denyWrite": protected_paths(directory),
            "denyRead": secret_paths(env),
        },
        "network": {"allowedDomains": []},
        "credentials": {"envVars": [{"name": name, "mode": "deny"} for name in CREDENTIAL_VARS]},
    }


def wrapper_text(directory: Path, python: str) -> str:
    """The ``attune`` the agent runs: the campaign's read-only CLI, isolated from the caller's Python
    environment (``-I``: no PYTHON* variables, no user site, no script-directory import path), bound to this
    campaign (``ATTUNE_CAMPAIGN_LOCK``: a ``--campaign`` naming another directory is refused)."""
    cli = directory / campaign_files.STATE / "skill" / "scripts" / "attune.py"
    return ("#!/bin/sh\n"
            "# the campaign's attune verbs: the read-only CLI copy, on this campaign only\n"
            "export ATTUNE_CAMPAIGN_DIR=%s\n"
            "export ATTUNE_CAMPAIGN_LOCK=%s\n"
            "export PYTHONDONTWRITEBYTECODE=1\n"
            "exec %s -I -B %s \"$@\"\n"
            % (shlex.quote(str(directory)), shlex.quote(str(directory)), shlex.quote(python),
               shlex.quote(str(cli))))


def write_wrapper(directory: Path, python: str) -> Path:
    """Write ``.attune/bin/attune`` (read-only, executable) when it is not there yet."""
    path = directory / WRAPPER
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wrapper_text(directory, python), encoding="utf-8")
        path.chmod(0o555)
        path.parent.chmod(0o555)
    return path


def agent_path(directory: Path, env) -> str:
    """The agent's ``PATH``: the campaign's ``attune`` first."""
    rest = env.get("PATH") or os.defpath
    return str(directory / campaign_files.STATE / "bin") + os.pathsep + rest


def ensure_layout(directory: Path) -> None:
    """Create the protected folders a verb fills later (``runs/``), so that the agent meets the sandbox's
    denial rather than a folder it made itself."""
    (directory / "runs").mkdir(exist_ok=True)
    (directory / "scratch").mkdir(exist_ok=True)
    notes = directory / "notes.md"
    if not notes.exists():
        notes.write_text("", encoding="utf-8")
