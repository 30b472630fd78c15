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
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "hooks"))

import campaign_files  # noqa: E402

sys.path.insert(0, str(HERE))
if str(HERE.parent / "skill" / "scripts") not in sys.path:
    sys.path.insert(0, str(HERE.parent / "skill" / "scripts"))
import integrity_key  # noqa: E402
from attune.core import secrets  # noqa: E402

VERB = "attune"
WRAPPER = campaign_files.STATE + "/bin/" + VERB
# protected besides campaign_files.PROTECTED: what Claude Code itself reads as instructions or settings
AGENT_CONFIG = (".claude/", "CLAUDE.md", ".mcp.json")
FREE_WRITE = ("notes.md", "scratch/")
# read-denied: the user's credentials (attune.core.secrets, which a confined local run cannot see either)
HOME_SECRETS = secrets.HOME_SECRETS
SYSTEM_SECRETS = secrets.SYSTEM_SECRETS
# The environment the campaign's attune runs with, frozen into its wrapper when the campaign is prepared (from the
# launcher's environment, never the caller's: a variable the agent set could load code into the verb's Python, as
# LD_PRELOAD does, or hand the kube client a kubeconfig whose exec plugin runs a program). Names only: none of
# these holds a secret, and the wrapper is readable by the agent. Where the user is and speaks (HOME, USER, LOGNAME,
# LANG, LC_*, TZ, TMPDIR; where the integrity keys and Claude Code's configuration are, which a local run must not
# see); the programs (PATH, without relative folders or folders inside the campaign); the
# cluster's address and trust (KUBECONFIG names a file the sandbox denies reading; in-cluster service address;
# proxies; CA bundles; RAY_ADDRESS); and the host plumbing a local run keeps (LD_LIBRARY_PATH, PYTHONPATH,
# CUDA_VISIBLE_DEVICES: the verb's own Python runs isolated, -I, and ignores PYTHONPATH).
WRAPPER_ENV = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "TMPDIR", "PATH",
               "XDG_STATE_HOME", "ATTUNE_KEY_DIR", "CLAUDE_CONFIG_DIR",
               "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "HTTPS_PROXY", "HTTP_PROXY",
               "NO_PROXY", "https_proxy", "http_proxy", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR",
               "REQUESTS_CA_BUNDLE", "RAY_ADDRESS", "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_VISIBLE_DEVICES")
CREDENTIAL_VARS = secrets.CREDENTIAL_VARS


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
    out = secrets.paths(env)
    out.append(integrity_key.key_dir(env))  # the integrity record's keys: a record the agent took is not signed
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


def file_tool_rules(paths) -> list:
    """Claude Code permission rules that keep its file tools off ``paths``: its Read, Grep, Glob, Edit and Write
    tools run outside the Bash sandbox, so its filesystem denials do not reach them. ``Read`` rules cover every tool
    that reads (Grep and Glob too) and ``Edit`` rules every tool that edits (Write too); ``//`` starts an absolute
    path. Each path is denied as itself and as a folder."""
    out = []
    for path in paths:
        absolute = "/" + os.path.abspath(path).rstrip("/")
        for tool in ("Read", "Edit"):
            for rule in ("%s(%s)" % (tool, absolute), "%s(%s/**)" % (tool, absolute)):
                if rule not in out:
                    out.append(rule)
    return out


def _program_path(directory: Path, value: str) -> str:
    """``PATH`` without relative folders (the caller's working directory) or folders inside the campaign, which the
    agent can write: a program a verb starts by name is never one the agent put there."""
    root = os.path.realpath(str(directory))
    kept = []
    for entry in (value or os.defpath).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        real = os.path.realpath(entry)
        if real == root or real.startswith(root + os.sep):
            continue
        if entry not in kept:
            kept.append(entry)
    return os.pathsep.join(kept)


def wrapper_env(directory: Path, env) -> list:
    """``NAME=value`` for each ``WRAPPER_ENV`` name set in ``env`` (the launcher's), in that order."""
    out = []
    for name in WRAPPER_ENV:
        value = env.get(name)
        if name == "PATH":
            value = _program_path(directory, value)
        if value:
            out.append("%s=%s" % (name, value))
    return out


def wrapper_text(directory: Path, python: str, env=None) -> str:
    """The ``attune`` the agent runs: the campaign's read-only CLI, with the environment the campaign was prepared
    with (``env -i`` then ``WRAPPER_ENV``: nothing the caller set reaches the verb), isolated from the caller's
    Python environment (``-I``: no PYTHON* variables, no user site, no script-directory import path), bound to this
    campaign (``ATTUNE_CAMPAIGN_LOCK``: a ``--campaign`` naming another directory is refused)."""
    env = os.environ if env is None else env
    cli = directory / campaign_files.STATE / "skill" / "scripts" / "attune.py"
    names = wrapper_env(directory, env) + ["ATTUNE_CAMPAIGN_DIR=%s" % directory, "ATTUNE_CAMPAIGN_LOCK=%s" % directory,
                                           "PYTHONDONTWRITEBYTECODE=1"]
    program = shutil.which("env", path=os.defpath + os.pathsep + "/usr/bin:/bin") or "/usr/bin/env"
    return ("#!/bin/sh\n"
            "# the campaign's attune verbs: the read-only CLI copy, on this campaign only, with the environment the\n"
            "# campaign was prepared with (nothing the caller set reaches them)\n"
            "exec %s -i %s %s -I -B %s \"$@\"\n"
            % (shlex.quote(program), " ".join(shlex.quote(item) for item in names), shlex.quote(python),
               shlex.quote(str(cli))))


def write_wrapper(directory: Path, python: str, env=None) -> Path:
    """Write ``.attune/bin/attune`` (read-only, executable) when it is not there yet."""
    path = directory / WRAPPER
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wrapper_text(directory, python, env), encoding="utf-8")
        path.chmod(0o555)
        path.parent.chmod(0o555)
    return path


def agent_path(directory: Path, env) -> str:
    """The agent's ``PATH``: the campaign's ``attune`` first, then the caller's absolute folders outside the campaign
    (a relative entry would let ``attune`` name a program in the agent's working directory)."""
    rest = _program_path(directory, env.get("PATH") or os.defpath)
    return str(directory / campaign_files.STATE / "bin") + (os.pathsep + rest if rest else "")


def ensure_layout(directory: Path) -> None:
    """Create the protected folders a verb fills later (``runs/``), so that the agent meets the sandbox's
    denial rather than a folder it made itself."""
    (directory / "runs").mkdir(exist_ok=True)
    (directory / "scratch").mkdir(exist_ok=True)
    notes = directory / "notes.md"
    if not notes.exists():
        notes.write_text("", encoding="utf-8")
