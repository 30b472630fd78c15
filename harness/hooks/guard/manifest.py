"""A small YAML reader for the kubectl manifests the guard must look into: enough block and flow
YAML (mappings, lists, scalars, documents separated by ``---``) to find each object's kind,
name and namespace, plus JSON; what it cannot read raises ``ManifestError``.
"""

import json
import re

from .context import MARK
from .paths import split_top


# ---------------------------------------------------------------------------- a small YAML reader
class ManifestError(Exception):
    pass


def _is_item(text):
    return text == "-" or text.startswith("- ")


def _strip_comment(value):
    if value[:1] in ("'", '"'):
        return value
    idx = value.find(" #")
    return value[:idx].rstrip() if idx >= 0 else value


def _split_key(text):
    if text[:1] in ("'", '"'):
        end = text.find(text[0], 1)
        if end < 0:
            return None
        rest = text[end + 1:].lstrip(" ")
        if not rest.startswith(":") or (len(rest) > 1 and rest[1] not in " \t"):
            return None
        return text[1:end], _strip_comment(rest[1:].strip())
    if text[:1] in ("{", "[", "#", "&", "*", "!", "|", ">"):
        return None
    idx = text.find(": ")
    if idx < 0:
        if text.endswith(":"):
            return text[:-1].strip(), ""
        return None
    return text[:idx].strip(), _strip_comment(text[idx + 2:].strip())


def _plain(value):
    value = value.strip()
    while value[:1] in ("!", "&"):
        parts = value.split(None, 1)
        value = parts[1] if len(parts) > 1 else ""
    if value.startswith("*"):
        return MARK
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return json.loads(value)
        except ValueError:
            return value[1:-1]
    if value in ("~", "null", "Null", "NULL"):
        return None
    return value


def _balanced(text):
    depth = 0
    quote = None
    for c in text:
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
    return depth <= 0


def _flow(text):
    text = text.strip()
    if len(text) < 2 or text[0] not in "[{" or text[-1] not in "]}":
        return _plain(text)
    parts = [p.strip() for p in split_top(text[1:-1], ",") if p.strip()]
    if text[0] == "[":
        return [_flow(p) for p in parts]
    out = {}
    for part in parts:
        key, _, value = part.partition(":")
        out[_plain(key)] = _flow(value)
    return out


class _Yaml(object):
    """Block-style YAML: mappings, sequences, plain/quoted/flow scalars; block scalars are skipped."""

    def __init__(self, lines):
        self.lines = lines
        self.pos = 0

    def node(self, indent):
        if self.pos >= len(self.lines) or self.lines[self.pos][0] < indent:
            return None
        ind, text = self.lines[self.pos]
        return self.seq(ind) if _is_item(text) else self.mapping(ind)

    def seq(self, ind):
        out = []
        while self.pos < len(self.lines):
            i2, text = self.lines[self.pos]
            if i2 != ind or not _is_item(text):
                break
            rest = text[1:].lstrip(" ")
            if not rest:
                self.pos += 1
                out.append(self.node(ind + 1))
                continue
            if _is_item(rest) or _split_key(rest) is not None:
                self.lines[self.pos] = (ind + len(text) - len(rest), rest)
                out.append(self.node(ind + 1))
            else:
                self.pos += 1
                out.append(self.scalar(rest, ind))
        return out

    def mapping(self, ind):
        out = {}
        while self.pos < len(self.lines):
            i2, text = self.lines[self.pos]
            if i2 < ind or (i2 == ind and _is_item(text)):
                break
            if i2 > ind:
                raise ManifestError("unexpected indentation at %r" % text[:60])
            pair = _split_key(text)
            if pair is None:
                raise ManifestError("expected key: value at %r" % text[:60])
            key, value = pair
            self.pos += 1
            if value == "":
                nxt = self.lines[self.pos] if self.pos < len(self.lines) else None
                if nxt is not None and (nxt[0] > ind or (nxt[0] == ind and _is_item(nxt[1]))):
                    out[key] = self.node(nxt[0])
                else:
                    out[key] = None
            else:
                out[key] = self.scalar(value, ind)
        return out

    def scalar(self, value, ind):
        if re.match(r"^[|>][0-9+-]*$", value):
            self.skip(ind)
            return "<block scalar>"
        if value[0] in "[{":
            while not _balanced(value) and self.pos < len(self.lines) and self.lines[self.pos][0] > ind:
                value += " " + self.lines[self.pos][1]
                self.pos += 1
            self.skip(ind)
            return _flow(value)
        self.skip(ind)  # continuation lines of a multi-line scalar
        return _plain(value)

    def skip(self, ind):
        while self.pos < len(self.lines) and self.lines[self.pos][0] > ind:
            self.pos += 1


def _yaml_lines(raw_lines):
    out = []
    for raw in raw_lines:
        raw = raw.rstrip("\r").replace("\t", "    ")
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        out.append((len(raw) - len(raw.lstrip(" ")), stripped))
    return out


def _objects_of(node, where):
    if isinstance(node, list):
        out = []
        for item in node:
            out.extend(_objects_of(item, where))
        return out
    if not isinstance(node, dict):
        return []
    kind = node.get("kind")
    items = node.get("items")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
        return _objects_of(items, where)
    meta = node.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    namespace = meta.get("namespace")
    return [{"kind": str(kind) if kind else "", "name": str(meta.get("name") or ""),
             "generateName": str(meta.get("generateName") or ""),
             "namespace": None if namespace is None else str(namespace), "where": where}]


def parse_manifest(text, where):
    stripped = text.strip()
    if not stripped:
        return []
    if stripped[0] in "{[" and MARK not in stripped:
        try:
            return _objects_of(json.loads(stripped), where)
        except ValueError:
            pass
    docs = [[]]
    for raw in text.split("\n"):
        if re.match(r"^---(\s|$)", raw):
            docs.append([])
            rest = raw[3:].strip()
            if rest and not rest.startswith("#"):
                docs[-1].append(rest)
            continue
        if re.match(r"^\.\.\.(\s|$)", raw):
            docs.append([])
            continue
        docs[-1].append(raw)
    objects = []
    for doc in docs:
        lines = _yaml_lines(doc)
        if not lines:
            continue
        parser = _Yaml(lines)
        node = parser.node(0)
        if parser.pos < len(lines):
            raise ManifestError("could not read past %r" % lines[parser.pos][1][:60])
        objects.extend(_objects_of(node, where))
    return objects
