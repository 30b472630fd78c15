"""Parse the lever catalog, skill/references/levers.md.

An entry is a ``## <lever-id>`` heading followed by ``- **Field**: text`` bullets (a field may continue on
indented lines). Entries end at ``## Appending lessons``; dated lessons a campaign appends under
``# Campaign lessons`` are parsed by :func:`parse_lessons`.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Dict, List

from . import files

FIELDS = ("Flags", "Mechanism", "Addresses", "Evidence", "Couples with", "Memory", "Correctness", "Pitfalls")
LESSON_FIELDS = ("Runs", "Result", "Verdict", "Lesson")
VERDICTS = ("kept", "rejected", "hurt")
END_HEADING = "Appending lessons"
CATALOG = Path(__file__).resolve().parents[2] / "references" / "levers.md"
SPECS = CATALOG.with_suffix(".yaml")  # each entry's machine-readable facts (levers.yaml's header says which)
SPEC_KEYS = {"ships", "try", "why", "after", "requires", "recommends", "unchecked", "excludes", "companions", "defaults",
             "modelled"}

_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_FIELD = re.compile(r"^- \*\*(?P<name>[^*]+)\*\*:\s*(?P<text>.*)$")
_LESSON = re.compile(r"^### (?P<date>\d{4}-\d{2}-\d{2}) (?P<lever>other: \S+|\S+) \(campaign (?P<campaign>[^)]+)\)\s*$")
_OTHER = re.compile(r"^other:\s*(?P<flag>\S+)$")
_FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9_-]*)")
_ENV = re.compile(r"(?<![\w-])([A-Z][A-Z0-9_]{2,})=")


def _fields(lines: List[str]) -> Dict[str, str]:
    out = {}  # type: Dict[str, str]
    current = None
    for line in lines:
        match = _FIELD.match(line)
        if match:
            current = match.group("name").strip()
            if current in out:
                raise ValueError("field %r given twice" % current)
            out[current] = match.group("text").strip()
        elif current and line.startswith((" ", "\t")) and line.strip():
            out[current] += " " + line.strip()
        elif line.strip():
            current = None
    return out


def _sections(text: str, marker: str) -> List[tuple]:
    """(heading, body lines) for each heading line starting with ``marker`` outside code fences."""
    found, heading, body, fenced = [], None, [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and (line.startswith("# ") or line.startswith("## ") or line.startswith("### ")):
            if heading is not None:
                found.append((heading, body))
            heading, body = (line[len(marker):].strip(), []) if line.startswith(marker) else (None, [])
            continue
        if heading is not None:
            body.append(line)
    if heading is not None:
        found.append((heading, body))
    return found


def parse(text: str) -> List[dict]:
    """Lever entries in order: ``{"id", "Flags", ..., "Pitfalls", "flags", "env"}``.

    ``flags`` are the ``--flag`` names in backtick spans that start with ``--`` under Flags, and ``env`` the
    ``NAME=`` env vars in backticks there.
    Raises ``ValueError`` on a malformed id or a missing field."""
    body = text.split("\n## %s" % END_HEADING, 1)[0]
    entries = []
    for heading, lines in _sections(body, "## "):
        if not _ID.match(heading):
            raise ValueError("lever id %r is not lower-case-with-dashes" % heading)
        fields = _fields(lines)
        missing = [name for name in FIELDS if not fields.get(name)]
        if missing:
            raise ValueError("lever %s lacks %s" % (heading, ", ".join(missing)))
        entry = {"id": heading}
        entry.update(fields)
        spans = re.findall(r"`([^`]*)`", fields["Flags"])
        # a span that starts with --flag is a training argument; others (numactl ...) are launcher commands
        entry["flags"] = sorted({flag for span in spans if span.startswith("--") for flag in _FLAG.findall(span)})
        entry["env"] = sorted({name for span in spans for name in _ENV.findall(span)})
        entries.append(entry)
    return entries


def parse_lessons(text: str) -> List[dict]:
    """Lessons under ``# Campaign lessons``: ``{"date", "lever", "campaign", "Runs", "Result", "Verdict", "Lesson"}``."""
    if "\n# Campaign lessons" not in text:
        return []
    tail = text.split("\n# Campaign lessons", 1)[1]
    lessons = []
    for heading, lines in _sections(tail, "### "):
        match = _LESSON.match("### " + heading)
        if not match:
            raise ValueError("lesson heading %r is not 'YYYY-MM-DD <lever-id> (campaign <name>)'" % heading)
        fields = _fields(lines)
        missing = [name for name in LESSON_FIELDS if not fields.get(name)]
        if missing:
            raise ValueError("lesson %s lacks %s" % (heading, ", ".join(missing)))
        if fields["Verdict"].split()[0].lower() not in VERDICTS:
            raise ValueError("lesson %s: verdict must be one of %s" % (heading, ", ".join(VERDICTS)))
        lesson = match.groupdict()
        lesson.update(fields)
        lessons.append(lesson)
    return lessons


def specs(path: Path = SPECS) -> Dict[str, dict]:
    """``{lever id: spec}`` from ``levers.yaml``: every key of a spec filled (``try`` None, maps and lists empty
    when not given). Raises ``ValueError`` naming the lever and the key on a malformed spec."""
    import yaml
    data = yaml.safe_load(files.read_text(path, "lever specs", "restore it from the skill"))
    if not isinstance(data, dict) or not isinstance(data.get("levers"), dict):
        raise ValueError("%s: no `levers:` map" % path)
    out = {}
    for lever, spec in data["levers"].items():
        if not isinstance(spec, dict):
            raise ValueError("%s: lever %s is not a map" % (path, lever))
        unknown = set(spec) - SPEC_KEYS
        if unknown or not isinstance(spec.get("ships"), bool) or not isinstance(spec.get("modelled"), bool):
            raise ValueError("%s: lever %s: unknown keys %s, or ships/modelled not true/false"
                             % (path, lever, sorted(unknown)))
        if spec.get("try") is None and not spec.get("why"):
            raise ValueError("%s: lever %s has no `try` and no `why`" % (path, lever))
        full = {"try": None, "why": None, "after": None, "requires": {}, "recommends": {}, "unchecked": [], "excludes": [],
                "companions": {}, "defaults": {}}
        full.update(spec)
        full["defaults"] = {name: str(value) for name, value in full["defaults"].items()}
        out[lever] = full
    return out


def load(path: Path = CATALOG) -> List[dict]:
    return parse(Path(path).read_text(encoding="utf-8"))


def campaign_catalog(campaign_dir) -> tuple:
    """``(path, text)`` of the catalog a campaign's levers are named from: its ``levers.md`` (the
    catalog and its lessons), else the skill's ``references/levers.md``."""
    path = Path(campaign_dir) / "levers.md"
    if not path.exists():
        path = CATALOG
    return path, files.read_text(path, "lever catalog", "restore it from skill/references/levers.md")


def catalog_ids(path, text: str) -> set:
    """The lever ids of the catalog ``text`` read from ``path``; an ``InputError`` naming ``path`` when it does
    not parse or holds no lever."""
    from .errors import InputError
    if "\n## %s" % END_HEADING not in text:
        raise InputError("%s: no `## %s` section, so the catalog is cut short or not a lever catalog. Fix: "
                         "restore the catalog part from skill/references/levers.md" % (path, END_HEADING))
    try:
        ids = {item["id"] for item in parse(text)}
        parse_lessons(text)
    except ValueError as exc:
        raise InputError("%s does not parse (%s). Fix: restore the catalog part from skill/references/levers.md"
                         % (path, exc))
    if not ids:
        raise InputError("%s: holds no lever (no `## <lever-id>` entry), so not a lever catalog. Fix: restore it "
                         "from skill/references/levers.md" % path)
    return ids


def lever_name(text: str, catalog, where="levers.md") -> str:
    """``text`` as a lever: a catalog id, or ``other: <flag>`` for a change outside the catalog
    (``other:<flag>`` is read the same). Returns the lever as recorded (``other: <flag>``, one
    space); raises ``ValueError`` naming the rule otherwise. ``catalog`` is the ids, read from ``where``."""
    text = (text or "").strip()
    other = _OTHER.match(text)
    if other:
        return "other: " + other.group("flag")
    if text in catalog:
        return text
    near = difflib.get_close_matches(text, sorted(catalog), n=3)
    raise ValueError("lever %r is not in %s%s. Fix: a catalog id (a `## <id>` heading there), or 'other: <flag>' "
                     "for a change outside the catalog" % (
                         text, where, " (did you mean %s?)" % ", ".join(near) if near else ""))
