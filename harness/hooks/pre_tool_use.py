#!/usr/bin/env python3
"""ATTUNE's PreToolUse guard: allow or deny each tool call of the agent before it runs.

The guard prevents accidents; it is not a security boundary. It stops the agent from doing by
mistake what a campaign must not do: touch another team's objects on the cluster, run kubectl
against another context or namespace, or rewrite the campaign's records by hand. A determined
program can get past it (a script written in one call and run in the next, a binary that calls
the Kubernetes API itself); the integrity check and the cluster's own permissions are what catch
those.

Input: the PreToolUse event as JSON on stdin (``tool_name``, ``tool_input``, ``cwd``, ...).
Output: exactly one JSON object on stdout,
``{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"|"deny",
"permissionDecisionReason": "..."}}``, and exit status 0, for every call. Any internal error is a
deny with its reason: a crash or a non-zero exit would let the call through (hooks fail open).

The campaign is ``ATTUNE_CAMPAIGN_DIR``, else ``CLAUDE_PROJECT_DIR`` (``campaign_files.campaign_dir``);
its frozen settings (``.attune/settings.env``) give the kubectl context, the namespace, the run
prefix, the log pod and the web switch. Relative paths in tool inputs resolve against the event's
``cwd``.

Rules:

* Bash: the command is lexed like a shell would (quotes, escapes, ``$'...'``, ``$(...)``, backticks,
  process substitution, here-documents), split into lists and pipelines, and each simple command
  is checked, looking through ``bash -c``/``sh -c``, ``env``, ``timeout``, ``nohup``, ``xargs``,
  ``watch``, ``sudo``, ``nice``, ``time``, ``command``, ``exec``, ``eval``, ``alias`` and ``find -exec``.
  A program the guard cannot resolve (a variable, a substitution, an ``eval``) is denied when the
  command could reach kubectl.
* kubectl: every invocation names the campaign's ``--context`` and ``-n``; no ``--kubeconfig``,
  ``KUBECONFIG=``, ``-A``, ``config``, nor node commands; changes only to objects whose names
  start with the run prefix (``-f`` manifests are read: files, directories and here-documents);
  exec/logs/cp/attach/port-forward only into the campaign's pods and the log pod.
* The file tools (Edit, Write, MultiEdit, NotebookEdit) do not run in the sandbox, so they get what a
  sandboxed command may write: a path inside the campaign that is not protected. Writes to protected
  campaign paths (``campaign_files.PROTECTED``) are denied there and in Bash redirections, tee, sed -i, mv, cp, rm, ln, chmod, touch,
  truncate, dd, install, rsync, find -delete and interpreter one-liners that write and name a
  protected file. ``attune`` verbs write the records; they are allowed.
* ``attune``: it runs outside Claude Code's sandbox, so wherever it is the program of a command the
  whole call must be exactly one ``attune VERB ...`` with literal arguments on this campaign
  (``guard/verbs.py``); a call asking for ``dangerouslyDisableSandbox`` is denied.
* WebFetch and WebSearch are denied when ``AUTOTUNE_ALLOW_WEB`` is off. Everything else is allowed.

The checks live in the ``guard`` package next to this script (``guard/__init__.py`` lists its
modules); this script reads the event, calls them and answers.

Standard library only; runs on Python 3.7.
"""

import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
try:
    from guard import dispatch  # noqa: F401 - every program's checker, loaded now rather than mid-check
    from guard.commands import analyze_text
    from guard.context import (
        FALSE, IMPORT_ERROR, NOTES, MAX_COMMAND, NOT_A_BOUNDARY, Ctx, Deny, Unparsable, campaign_files)
    from guard.paths import protected_reason
    _GUARD_ERROR = None
except Exception as _exc:  # the hook must still answer (deny) rather than crash and fail open
    campaign_files = None
    _GUARD_ERROR = "%s: %s" % (type(_exc).__name__, _exc)


# -------------------------------------------------------------------------------------- decide
_EDIT_TOOLS = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"}
_GUARDED = frozenset(("Bash", "WebFetch", "WebSearch")) | frozenset(_EDIT_TOOLS)


def _allow(what):
    return "allow", "guard: %s allowed (%s)." % (what, NOT_A_BOUNDARY)


def _decide(event, campaign, settings):
    if not isinstance(event, dict):
        return "deny", "guard: the hook's input is not a JSON object; denied because the guard cannot check it."
    tool = event.get("tool_name")
    tool_input = event.get("tool_input")
    if not isinstance(tool_input, dict):
        tool_input = {}
    if tool not in _GUARDED:
        return _allow(str(tool))
    if campaign_files is None:
        return "deny", ("guard: cannot load campaign_files.py next to the hook (%s); every checked tool call is "
                        "denied until the harness is installed whole." % IMPORT_ERROR)
    if not campaign:
        return "deny", ("guard: no campaign directory (neither ATTUNE_CAMPAIGN_DIR nor CLAUDE_PROJECT_DIR is set); "
                        "run the agent through the ATTUNE launcher.")
    campaign = os.path.realpath(campaign)
    settings = settings or {}
    cwd = event.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        cwd = campaign
    if tool in ("WebFetch", "WebSearch"):
        value = str(settings.get("AUTOTUNE_ALLOW_WEB", "1")).strip().lower()
        if value in FALSE:
            return "deny", ("guard: web access is off for this campaign (AUTOTUNE_ALLOW_WEB=%s); work from the "
                            "skill's references (skill/references/) and the campaign's own files." % value)
        return _allow(tool)
    if tool in _EDIT_TOOLS:
        path = tool_input.get(_EDIT_TOOLS[tool]) or tool_input.get("file_path")
        if not isinstance(path, str) or not path:
            return "deny", ("guard: %s without a %s; the guard cannot tell which file it changes."
                            % (tool, _EDIT_TOOLS[tool]))
        rel = campaign_files.relative(campaign, path, cwd)
        if rel is None:
            # the file tools do not run in the sandbox: they get what a sandboxed command may write, no more
            return "deny", ("guard: %s of %s: outside the campaign directory, which is all the agent may write (its "
                            "Bash commands run in a sandbox that writes nowhere else); %s." % (tool, path, NOTES))
        if campaign_files.is_protected(rel):
            return "deny", protected_reason(rel, "%s of" % tool, path)
        return _allow("%s of %s" % (tool, path))
    if tool_input.get("dangerouslyDisableSandbox"):
        return "deny", ("guard: commands run inside the sandbox; dangerouslyDisableSandbox is not available in a "
                        "campaign. Only `attune VERB ...`, run alone, runs outside it.")
    command = tool_input.get("command")
    if not isinstance(command, str):
        return "deny", "guard: Bash without a command string; the guard cannot check it."
    if len(command) > MAX_COMMAND:
        return "deny", ("guard: the command is longer than %d characters, too long to check; write long inputs "
                        "to a file in scratch/ first." % MAX_COMMAND)
    ctx = Ctx(campaign, settings, cwd, command)
    analyze_text(command, ctx, 0)
    return _allow("Bash command")


def decide(event, campaign_dir, settings):
    """``(decision, reason)`` for one PreToolUse event: decision is "allow" or "deny".

    ``campaign_dir``: the campaign directory (None when unknown); ``settings``: its frozen settings
    as ``{NAME: text}`` (``campaign_files.read_settings``)."""
    if _GUARD_ERROR is not None:
        return "deny", ("guard: cannot load the guard package next to the hook (%s); every tool call is denied "
                        "until the harness is installed whole." % _GUARD_ERROR)
    try:
        return _decide(event, campaign_dir, settings)
    except Deny as deny:
        return "deny", deny.reason
    except Unparsable as exc:
        return "deny", ("guard: cannot parse this command (%s), so it is denied as unparsable. Fix the quoting or "
                        "split the command; kubectl needs --context and -n written out." % exc)
    except RecursionError:
        return "deny", "guard: the command nests too deeply to check; write it more plainly."
    except Exception as exc:  # never crash: a crash would let the call through
        return "deny", ("guard: internal error (%s: %s) while checking this call; it is denied because the guard "
                        "cannot check it. Try a simpler form of the command." % (type(exc).__name__, exc))


def _output(decision, reason):
    return json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                              "permissionDecisionReason": reason}})


def main():
    try:
        stream = getattr(sys.stdin, "buffer", sys.stdin)
        data = stream.read()
        if isinstance(data, bytes):
            data = data.decode("utf-8", "replace")
        try:
            event = json.loads(data)
        except ValueError as exc:
            decision, reason = "deny", ("guard: the hook's input is not JSON (%s); denied because the guard "
                                        "cannot check it." % exc)
        else:
            campaign = campaign_files.campaign_dir() if campaign_files is not None else None
            settings = campaign_files.read_settings(campaign) if (campaign and campaign_files is not None) else {}
            decision, reason = decide(event, campaign, settings)
    except BaseException as exc:  # noqa: B902 - the hook must answer, whatever happened
        decision, reason = "deny", ("guard: internal error (%s: %s); denied because the guard cannot check it."
                                    % (type(exc).__name__, exc))
    sys.stdout.write(_output(decision, reason) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
