"""Claude Code's settings outside the campaign that can loosen the agent's confinement.

The user's settings file (``$CLAUDE_CONFIG_DIR/settings.json``, else ``~/.claude/settings.json``)
applies to every session the launcher starts, besides the campaign's own ``--settings`` file: a
``disableAllHooks``, a ``hooks`` entry, a ``permissions`` rule or a ``sandbox`` key added there between
sessions changes what the next, resumed session may do. The integrity record keeps, per file, a
digest of every key but the cosmetic ones (``COSMETIC``), so a change to any other key fails the
campaign at the next launch, naming the keys; changing the theme does not.

Standard library only and Python 3.7 syntax (the integrity check, which the Stop hook imports, uses it).
"""

import hashlib
import json
import os

# keys that change how Claude Code looks or updates, never what the agent may do
COSMETIC = frozenset(("theme", "editorMode", "preferredNotifChannel", "autoUpdates", "autoUpdatesChannel",
                      "spinnerTipsEnabled", "cleanupPeriodDays", "feedbackSurveyState", "outputStyle", "verbose",
                      "language", "prefersReducedMotion", "terminalProgressBarEnabled"))


def paths(env=None):
    """The user-level settings files Claude Code reads for a session started with ``env``."""
    env = os.environ if env is None else env
    home = env.get("HOME") or os.path.expanduser("~")
    out = [os.path.join(home, ".claude", "settings.json")]
    if env.get("CLAUDE_CONFIG_DIR"):
        path = os.path.join(os.path.abspath(env["CLAUDE_CONFIG_DIR"]), "settings.json")
        if path not in out:
            out.append(path)
    return out


def snapshot(path):
    """``{"state": "missing"|"json"|"bytes", "sha256": ..., "values": {key: digest}}`` for one file: per key
    (cosmetic keys left out) the SHA-256 of its value as canonical JSON; a file that is not a JSON object is
    recorded as bytes."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (IOError, OSError):
        return {"state": "missing"}
    try:
        parsed = json.loads(data.decode("utf-8"))
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return {"state": "bytes", "sha256": hashlib.sha256(data).hexdigest()}
    values = {}
    for key in sorted(parsed):
        if key in COSMETIC:
            continue
        text = json.dumps(parsed[key], sort_keys=True, separators=(",", ":"))
        values[key] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return {"state": "json", "values": values}


def record(env=None):
    """``{path: snapshot}`` for every user-level settings file."""
    return dict((path, snapshot(path)) for path in paths(env))


def differences(recorded):
    """Human-readable changes between a ``record()`` and the files now, as ``(path, text)``; empty when none."""
    out = []
    if not isinstance(recorded, dict):
        return out
    for path in sorted(recorded):
        before = recorded[path] if isinstance(recorded[path], dict) else {}
        now = snapshot(path)
        if before == now:
            continue
        if before.get("state") == "json" and now.get("state") == "json":
            old, new = before.get("values") or {}, now.get("values") or {}
            parts = ["%s added" % key for key in sorted(set(new) - set(old))]
            parts += ["%s removed" % key for key in sorted(set(old) - set(new))]
            parts += ["%s changed" % key for key in sorted(set(old) & set(new)) if old[key] != new[key]]
            out.append((path, ", ".join(parts)))
        else:
            out.append((path, "%s before, %s now" % (_state(before), _state(now))))
    return out


def _state(snap):
    return {"missing": "missing", "json": "a settings object", "bytes": "not a JSON object"}.get(
        snap.get("state"), "unknown")
