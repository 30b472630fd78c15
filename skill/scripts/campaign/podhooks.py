"""Launching a run through the in-pod hooks (``pod_hooks/``): which hooks, and the wrapped entrypoint.

A hook is named as ``NAME`` or ``NAME:KEY=VALUE,KEY=VALUE`` on the command line and stored as
``{"name": NAME, "args": {KEY: VALUE}}`` (candidate.json ``pod_hooks``, the launch row). At
submission the training command inside the entrypoint (from its first launcher word, after any
``NAME=value`` words, to the end of its arguments) is prefixed with
``python3 <scripts>/pod_hooks/wrap.py --hooks ... --out <dir> --``; everything else in the
entrypoint is kept byte for byte. The recipe the ledger hashes is the unwrapped one: hooks observe
a run, they are not part of the recipe that ships.
"""

from __future__ import annotations

from pathlib import Path

from attune.core.errors import InputError
from attune.pod_hooks import wrap as wrap_mod

SCRIPTS = Path(__file__).resolve().parent.parent  # skill/scripts of this installation


def parse(texts, where: str = "--pod-hook") -> list:
    """``NAME[:KEY=VALUE,...]`` strings to hook records, checked against the registry now (not in the pod)."""
    hooks = []
    for text in texts or ():
        name, _, rest = text.partition(":")
        args, key = {}, None
        for item in filter(None, rest.split(",")):
            name_part, sep, value = item.partition("=")
            if sep and name_part:
                key = name_part.strip()
                args[key] = value.strip()
            elif key is not None:  # a value holding commas: ranks=0,8
                args[key] += "," + item.strip()
            else:
                raise InputError("%s %s: %r is not KEY=VALUE. Fix: e.g. %s profiler:start=10,end=12"
                                 % (where, text, item, where))
        hooks.append({"name": name.strip(), "args": args} if args else {"name": name.strip()})
    check(hooks, where)
    return hooks


def check(hooks: list, where: str = "--pod-hook") -> None:
    """Build the hooks as the wrapper will (unknown names, keys and bad values are InputErrors)."""
    if not hooks:
        return
    try:
        names, hook_args = _argv_parts(hooks)
        wrap_mod.select(names, hook_args)
    except (wrap_mod.UsageError, KeyError, TypeError, AttributeError) as exc:  # a hand-edited record too
        raise InputError("%s: %s" % (where, str(exc).replace("--hook-arg ", "")))


def _argv_parts(hooks: list):
    names = ",".join(hook["name"] for hook in hooks)
    hook_args = ["%s.%s=%s" % (hook["name"], key, value) for hook in hooks
                 for key, value in sorted((hook.get("args") or {}).items())]
    return names, hook_args


def out_dir(settings, run: str, run_dir: Path) -> str:
    """Where the wrapper writes ``pod_hooks.json`` and what the hooks collect, as the run sees it."""
    if settings.backend == "kuberay":
        return "%s/%s/pod_hooks" % (settings.shared_dir.rstrip("/"), run)
    return str((run_dir / "pod_hooks").resolve())


def scripts_dir(settings) -> str:
    """``skill/scripts`` as the run's pods see it."""
    if settings.pod_scripts:
        return settings.pod_scripts.rstrip("/")
    if settings.backend == "kuberay":
        raise InputError("ATTUNE_POD_SCRIPTS is not set: the pods need the wrapper. Fix: copy skill/scripts to the "
                         "shared volume and set ATTUNE_POD_SCRIPTS to that path as the pods see it")
    return str(SCRIPTS)


def wrap(recipe, hooks: list, settings, run: str, run_dir: Path):
    """``recipe`` with its training command run by the pod-hooks wrapper (``recipe`` itself when no hooks)."""
    if not hooks:
        return recipe
    check(hooks)
    names, hook_args = _argv_parts(hooks)
    words = ["python3", "%s/pod_hooks/wrap.py" % scripts_dir(settings), "--hooks", names]
    for item in hook_args:
        words += ["--hook-arg", item]
    words += ["--out", out_dir(settings, run, run_dir), "--"]
    return recipe.with_command(recipe.command.wrap(words))


def describe(hook: dict) -> str:
    """``profiler start=10 end=12``: a hook as one line."""
    args = " ".join("%s=%s" % item for item in sorted((hook.get("args") or {}).items()))
    return ("%s %s" % (hook["name"], args)).strip()
