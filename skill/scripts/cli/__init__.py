"""attune: the one command-line interface of an ATTUNE campaign.

Usage: python3 skill/scripts/attune.py <verb> [--campaign DIR] [--json] ...

Verbs are thin: each parses its arguments, calls one library function, prints the result and
returns an exit code. Every verb takes ``--campaign DIR`` (default ``$ATTUNE_CAMPAIGN_DIR``, else
the current directory). Stdout is an interface: ``key: value`` lines, or one JSON object with
``--json``; diagnostics go to stderr.

Exit codes: 0 ok, 1 check failed, 2 usage or bad input, 3 integrity.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path

from attune.core.errors import AttuneError, InputError

# the verbs register themselves in VERBS as their modules load, in this order (the order of --help)
from . import verbs_campaign, verbs_runs, verbs_tools  # noqa: F401
from .base import INPUT_METAVARS, VERBS, add_common, chosen_parser

__all__ = ["INPUT_METAVARS", "VERBS", "build_parser", "main"]


# ---------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attune", description=__doc__.split("\n\n")[0],
                                     epilog="Exit codes: 0 ok, 1 check failed, 2 usage or bad input, 3 integrity.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for name, spec in VERBS.items():
        p = sub.add_parser(name, help=spec.help, description=spec.help)
        add_common(p, spec.config)
        p.set_defaults(func=spec.func)
        if spec.arguments is not None:
            spec.arguments(p)
    return parser


# Options for a developer at their own shell that run or import code from a path the caller names: under a campaign's
# wrapper (outside the agent's sandbox) they would run the agent's code with the user's rights, so they are refused
# there. (verb, option's dest): why.
DEVELOPER_OPTIONS = {
    ("gate", "coverage"): "--coverage builds Megatron-LM's argument parser by importing the checkout's Python, "
                          "which would run outside the agent's sandbox",
}


def _within_lock(parser, args) -> None:
    """Under ``ATTUNE_CAMPAIGN_LOCK`` (the campaign's wrapper, which runs outside the agent's sandbox), a verb
    reads only files inside the campaign and writes only into its ``scratch/``: otherwise the one command out
    of the sandbox would read the kube config or write over a record for it. A developer option
    (``DEVELOPER_OPTIONS``) is refused."""
    lock = os.environ.get("ATTUNE_CAMPAIGN_LOCK")
    if not lock or not getattr(args, "verb", None):
        return
    for (verb_name, dest), why in DEVELOPER_OPTIONS.items():
        if args.verb == verb_name and getattr(args, dest, None):
            raise InputError("%s: a campaign's attune does not run it (%s). Fix: run `attune %s --%s ...` yourself, "
                             "from a checkout outside the campaign" % ("--" + dest, why, verb_name, dest))
    root = Path(lock).expanduser().resolve()
    for item in chosen_parser(parser, args)._actions:
        if item.dest == "campaign":  # resolve_dir refuses another campaign, with its own message
            continue
        kind = "output" if item.metavar == "OUT" else "input" if item.metavar in INPUT_METAVARS else None
        value = getattr(args, item.dest, None) if kind else None
        for given in ([] if value is None else value if isinstance(value, list) else [value]):
            path = Path(os.path.expanduser(str(given)))
            path = (path if path.is_absolute() else Path.cwd() / path).resolve()
            inside = root / "scratch" if kind == "output" else root
            if path != inside and inside not in path.parents:
                raise InputError("%s %s: outside %s; this campaign's attune %s only %s. Fix: %s" % (
                    "/".join(item.option_strings) or item.dest, given, inside, "writes" if kind == "output" else
                    "reads", "into its scratch/" if kind == "output" else "files inside the campaign",
                    "write to scratch/" if kind == "output" else "copy the file into scratch/ first"))


def main(argv=None) -> int:
    # A verb builds one large, acyclic structure (every ledger row) and exits: the cyclic garbage
    # collector would only rescan it, a third of the run time on a 100,000-row ledger.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        if collecting:
            gc.enable()


def _main(argv) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    program = None
    if argv[:1] == ["kube"] and "--" in argv:  # kube exec's program: everything after --, whatever its options
        cut = argv.index("--")
        argv, program = argv[:cut], argv[cut + 1:]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help exits 0, usage errors 2
        return int(exc.code or 0)
    if program is not None:
        args.command = list(args.command or []) + program
    try:
        _within_lock(parser, args)
        return args.func(args)
    except AttuneError as exc:
        return _refused(args, exc)
    except KeyboardInterrupt:
        print("attune %s: interrupted" % args.verb, file=sys.stderr)
        return 130


def _refused(args, exc: AttuneError) -> int:
    """A refusal or an error: its lines on stderr, as always; with ``--json`` also one JSON object on stdout,
    ``{"error": {"verb", "exit_code", "kind", "message", "fix"}}`` (``fix``: the text after "Fix:", or null), so an
    agent reading JSON never meets prose alone."""
    lines = list(exc.lines())
    for line in lines:
        print("attune %s: %s" % (args.verb, line), file=sys.stderr)
    if getattr(args, "json", False):
        message = " ".join(lines)
        fix = message.split("Fix: ", 1)[1].strip() if "Fix: " in message else None
        print(json.dumps({"error": {"verb": args.verb, "exit_code": exc.exit_code, "kind": type(exc).__name__,
                                    "message": message, "fix": fix}}))
    return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
