"""A campaign's frozen copies: the settings it started with (``.attune/settings.env``) and the input files it acts on
again and again (the baseline recipe, the gate's rule overrides), each checked against the SHA-256 its first ledger
row holds. Once a campaign has started, these are the only source of its settings and inputs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Mapping, Optional

from . import files
from .errors import IntegrityError, SettingsError
from .settings import Settings, load, parse_env_file


def frozen_path(campaign_dir) -> Path:
    return Path(campaign_dir) / ".attune" / "settings.env"


def freeze(settings: Settings, campaign_dir) -> Path:
    """Write the campaign's frozen copy; refuse to overwrite a different one."""
    settings = settings.as_given()
    path = frozen_path(campaign_dir)
    text = settings.render_env()
    if path.exists():
        # a copy frozen before a setting was added lacks its line: it is the same settings if it loads to them
        frozen = files.read_text(path, "frozen settings file", "restore it, or start a new campaign directory")
        if frozen != text:
            try:
                same = load(parse_env_file(path)) == settings
            except SettingsError as exc:  # cut short, or edited: wherever the cut falls, the file is named
                raise SettingsError(["%s: the campaign's frozen settings are not valid (%s). Fix: restore the settings "
                                     "the campaign started with, or start a new campaign directory"
                                     % (path, "; ".join(exc.problems))])
        if frozen != text and not same:
            raise SettingsError(["%s: the campaign already has different frozen settings. Fix: resume with the "
                                 "settings it started with, or start a new campaign directory" % path])
        return path
    files.make_folders(path.parent)
    files.write_text(path, text)
    return path


def file_sha256(path) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _first_row(campaign_dir) -> dict:
    """The campaign's first ledger row (``campaign``); {} where there is none to read."""
    try:
        with open(os.path.join(str(campaign_dir), "ledger.jsonl"), "rb") as handle:
            first = json.loads(handle.readline().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return first if isinstance(first, dict) and first.get("kind") == "campaign" else {}


def _recorded_sha256(campaign_dir) -> Optional[str]:
    """The ``settings_sha256`` of the campaign's first ledger row (``campaign``), None where there is none to read."""
    sha = _first_row(campaign_dir).get("settings_sha256")
    return sha if isinstance(sha, str) else None


# The input files a campaign acts on again and again (the baseline recipe every baseline launch and candidate
# starts from, the gate's rules every verdict is judged by), copied into its records when it starts: the files the
# settings name may sit where the agent can write (the campaign's top level), so every later read takes the copy,
# whose SHA-256 the first ledger row holds. (attribute, setting, copy in the campaign, field of the first row)
FROZEN_INPUTS = (("baseline_yaml", "ATTUNE_BASELINE_YAML", ".attune/baseline.yaml", "baseline_sha256"),
                 ("gate_rules", "ATTUNE_GATE_RULES", ".attune/gate_rules.yaml", "gate_rules_sha256"))


def freeze_inputs(settings: Settings, campaign_dir) -> dict:
    """Copy each input file the settings name into the campaign (once, read-only); ``{first-row field: sha256}`` of
    the copies. A setting that names no file here is left out (the doctor and the launch say what is missing)."""
    settings = settings.as_given()
    out = {}
    for attr, _env, rel, field in FROZEN_INPUTS:
        source = getattr(settings, attr)
        target = Path(campaign_dir) / rel
        if not target.is_file():
            if not source or not Path(source).is_file():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            files.atomic_write(target, Path(source).read_bytes())
            target.chmod(0o444)
        out[field] = file_sha256(target)
    return out


def _with_frozen_inputs(campaign_dir, settings: Settings) -> Settings:
    """``settings`` reading each frozen input from the campaign's copy, checked against the first ledger row's
    SHA-256; ``IntegrityError`` (exit 3) when a copy is gone or changed."""
    first = _first_row(campaign_dir)
    given, changes = [], {}
    for attr, env, rel, field in FROZEN_INPUTS:
        recorded = first.get(field)
        if not isinstance(recorded, str):
            continue  # a campaign started before inputs were frozen, or with none given
        target = Path(campaign_dir) / rel
        fix = "Fix: restore %s (the copy of %s the campaign started with), or start a new campaign" % (target, env)
        if not target.is_file() or target.is_symlink():
            raise IntegrityError("%s: the campaign's frozen copy of %s is gone. %s" % (target, env, fix))
        found = file_sha256(target)
        if found != recorded:
            raise IntegrityError("%s: its bytes hash to %s, not the %s %s the campaign's first ledger row recorded: "
                                 "the frozen copy of %s was changed. %s" % (target, found[:16], field, recorded[:16],
                                                                             env, fix))
        given.append((attr, getattr(settings, attr)))
        changes[attr] = str(target)
    return dataclasses.replace(settings, given=tuple(given), **changes) if changes else settings


def for_campaign(campaign_dir, env: Mapping[str, str] = None, config_file=None) -> Settings:
    """The campaign's frozen settings when it has them, else the environment (and config file).
    A config file given is read either way, so that one it cannot read is refused, never ignored."""
    path = frozen_path(campaign_dir)
    if path.exists():
        if config_file is not None:
            parse_env_file(config_file)
        values = parse_env_file(path)
        fix = "Fix: restore the settings the campaign started with (its first ledger row has their settings_sha256)"
        with open(path, "rb") as handle:  # freeze writes whole lines: a last line without its newline was cut
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                raise SettingsError(["%s: ends mid-line, so it was cut short. %s" % (path, fix)])
        recorded = _recorded_sha256(campaign_dir)
        if recorded is not None and recorded != file_sha256(path):  # cut at a line's end, or edited
            raise SettingsError(["%s: its bytes hash to %s, not the settings_sha256 %s the campaign's first ledger "
                                 "row recorded: it was changed or cut short. %s"
                                 % (path, file_sha256(path)[:16], recorded[:16], fix)])
        try:
            settings = load(values)
        except SettingsError as exc:
            raise SettingsError(["%s: the campaign's frozen settings are not valid (%s). %s"
                                 % (path, "; ".join(exc.problems), fix)])
        return _with_frozen_inputs(campaign_dir, settings)
    return load(env, config_file)
