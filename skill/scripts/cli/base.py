"""The verb registry and what every verb shares: the campaign directory, its snapshot and settings, and the output."""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from attune.campaign import ledger as campaign_mod, snapshot as snapshot_mod
from attune.core import settings as settings_mod

VERBS = {}  # name -> Verb, in the order of --help
Verb = collections.namedtuple("Verb", "func help arguments config")
# An argument that names a file or folder a verb reads has one of these metavars (a test finds them all
# and feeds each one files it cannot read); an output the verb writes is OUT.
INPUT_METAVARS = ("FILE", "DIR", "LOG", "RECIPE", "TRACE")


def verb(name, help_text, arguments=None, config=True):
    """Register ``func`` as the verb ``name``: its help, the function that declares its own arguments on its
    parser (beside the handler), and whether it reads settings (then it takes ``--config``)."""
    def wrap(func):
        VERBS[name] = Verb(func, help_text, arguments, config)
        return func
    return wrap


def emit(args, data: dict, text: str) -> None:
    """The verb's result on stdout: one JSON object with ``--json``, else its text."""
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def campaign_dir(args) -> Path:
    """The campaign directory the verb works on (``--campaign``, else ``$ATTUNE_CAMPAIGN_DIR``, else here)."""
    return campaign_mod.resolve_dir(args.campaign)


def take_snapshot(args, use_cache: bool = False):
    """The campaign as its verified ledger states it (``snapshot.take``); a dry run saves no view cache."""
    return snapshot_mod.take(campaign_dir(args), config_file=getattr(args, "config", None), use_cache=use_cache,
                             save_cache=not getattr(args, "dry_run", False))


def campaign_settings(args, campaign):
    """The campaign's frozen settings (``--config`` read and checked); the campaign must have a ledger."""
    campaign.require_ledger()
    return campaign.settings(config_file=getattr(args, "config", None))


def check_config(args) -> None:
    """Read ``--config`` where this form of a verb needs no settings: a file given is never ignored unread."""
    if getattr(args, "config", None) is not None:
        settings_mod.parse_env_file(args.config)


def add_common(parser, config: bool, nested: bool = False) -> None:
    """The options every verb takes (``--campaign``, ``--json``), and ``--config`` where it reads settings (a file
    given to a verb that would ignore it is refused by argparse). On a subcommand (``nested``) they may come
    after its name too, and leave what was given before it as it was."""
    unset = argparse.SUPPRESS if nested else None
    parser.add_argument("--campaign", metavar="DIR", default=unset,
                        help="campaign directory (default: $ATTUNE_CAMPAIGN_DIR, else the current directory)")
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS if nested else False,
                        help="print one JSON object")
    if config:
        parser.add_argument("--config", metavar="FILE", default=unset,
                            help="config.env to read settings from (always read and checked; its values are "
                                 "ignored once the campaign froze its own)")


def subcommands(parser, handlers: dict, config: bool = False):
    """A verb's subcommands (``attune rows build``): ``handlers`` maps each name to ``(help, arguments, handler)``;
    the chosen one's handler is ``args.handler``, its name ``args.action``."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    for name, (help_text, arguments, handler) in handlers.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_common(p, config, nested=True)
        p.set_defaults(handler=handler)
        arguments(p)
    return sub


def chosen_parser(parser, args):
    """The innermost parser of the command line ``args`` came from (a verb's, or its subcommand's)."""
    names = [getattr(args, "verb", None), getattr(args, "action", None)]
    for name in names:
        action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if action is None or name not in action.choices:
            break
        parser = action.choices[name]
    return parser
