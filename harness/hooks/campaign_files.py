"""What the hooks and the integrity check share: where the campaign is, its frozen settings, and
which of its files are protected. Standard library only; runs on Python 3.7.

The one declaration of what the agent may and may not change in a campaign directory:

* ``PROTECTED``: never edited by the agent (the guard denies it, the integrity check catches it).
  Each entry is a path relative to the campaign directory; a trailing ``/`` covers a whole tree.
* ``APPEND_ONLY``: may only grow, by the tools' own appends (a recorded prefix must stay byte for
  byte; the integrity check verifies what was appended).
* ``SESSION_PROTECTED``: protected while an agent session runs (the prompts); the launcher may
  change them between sessions, recording the change in the ledger.
* ``AGENT_CONFIG``: Claude Code's settings, hooks, skills and instruction files in the campaign (protected,
  and recorded by the integrity check: a change between sessions fails the campaign).
* ``FREE``: the agent's own scratch space. Everything not listed here or above is not protected by
  the integrity record but is still written only through the ``attune`` verbs (runs/, RESULTS.md).
"""

import os
import shlex

STATE = ".attune"
SETTINGS = ".attune/settings.env"
INTEGRITY = ".attune/integrity.json"
VIOLATION = ".attune/integrity_violation.json"
SESSIONS = ".attune/sessions.jsonl"
# the baseline recipe as the campaign started with it: every baseline launch reads this copy (never the file the
# settings name, which may sit where the agent can write), and the first ledger row holds its SHA-256
BASELINE = ".attune/baseline.yaml"

APPEND_ONLY = ("ledger.jsonl", "gpu_hours.jsonl", "levers.md")
HEADS = ("ledger.jsonl.head", "gpu_hours.jsonl.head")
SESSION_PROTECTED = ("goal_prompt.txt", "resume_prompt.txt")
# what Claude Code reads as the agent's settings, hooks or instructions; Claude Code itself writes
# bookkeeping under .claude/ (such as .claude/.cc-writes), so the integrity record holds these paths only
AGENT_CONFIG = (".claude/settings.json", ".claude/settings.local.json", ".claude/hooks", ".claude/agents",
                ".claude/commands", ".claude/skills", ".claude/CLAUDE.md", "CLAUDE.md", "CLAUDE.local.md", ".mcp.json")
PROTECTED = (".attune/", "runs/", "RESULTS.md", "REPORT.md", "recipe.yaml", "results_throughput.png",
             "past_tuning_project.json", ".claude/", "CLAUDE.md", "CLAUDE.local.md", ".mcp.json") \
    + APPEND_ONLY + HEADS + SESSION_PROTECTED
FREE = ("notes.md", "scratch/")


def campaign_dir(env=None):
    """``ATTUNE_CAMPAIGN_DIR`` (set by the launcher), else ``CLAUDE_PROJECT_DIR``; None when neither."""
    env = os.environ if env is None else env
    chosen = env.get("ATTUNE_CAMPAIGN_DIR") or env.get("CLAUDE_PROJECT_DIR")
    return os.path.realpath(chosen) if chosen else None


def read_settings(directory):
    """The campaign's frozen settings (``.attune/settings.env``: ``KEY=value``, shell-quoted) as a dict;
    {} when there is no such file."""
    path = os.path.join(directory, SETTINGS)
    out = {}
    try:
        with open(path, "r", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (IOError, OSError):
        return out
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        try:
            words = shlex.split(value)
        except ValueError:
            words = [value]
        out[key.strip()] = words[0] if words else ""
    return out


def relative(directory, path, cwd=None):
    """``path`` (absolute, or relative to ``cwd``) relative to the campaign directory, with symlinks and
    ``..`` resolved; None when it lies outside the campaign."""
    if not path:
        return None
    base = cwd or directory
    full = os.path.realpath(os.path.join(base, os.path.expanduser(path)))
    root = os.path.realpath(directory)
    if full == root:
        return "."
    if not full.startswith(root + os.sep):
        return None
    return os.path.relpath(full, root)


def is_protected(rel):
    """Whether a campaign-relative path is protected (``PROTECTED``; the campaign root itself too)."""
    if rel is None:
        return False
    if rel == ".":
        return True
    rel = rel.replace(os.sep, "/")
    for entry in PROTECTED:
        if entry.endswith("/"):
            if rel == entry[:-1] or rel.startswith(entry):
                return True
        elif rel == entry:
            return True
    return False
