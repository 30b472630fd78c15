"""The integrity record's view of files: what is at a path (type, SHA-256, size, mode bits, a symlink's
target, never followed), a tree walked into such entries, Python's bytecode caches accepted only when they
are their recorded source compiled by this interpreter, and the problems one recorded entry and the file
now make. ``integrity.py`` records and verifies a campaign with these.

Standard library only and Python 3.7 syntax (the Stop hook imports ``integrity``, which imports this).
"""

from __future__ import print_function

import errno
import hashlib
import importlib.util
import marshal
import os
import re
import stat
import sys

import campaign_files

_sha256 = hashlib.sha256
SESSION_PROTECTED = tuple(campaign_files.SESSION_PROTECTED)
MISSING = {"type": "missing"}
_CHUNK = 1 << 20


def _read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def _join(directory, rel):
    return os.path.join(directory, *rel.split("/"))


def _hash_file(path):
    digest = _sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(_CHUNK)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def _mode(st):
    return "%04o" % stat.S_IMODE(st.st_mode)


def _entry(path):
    """What is at ``path`` (never following a symlink): a dict, or None when nothing is there."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        return {"type": "error", "error": str(exc)}
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError as exc:
            target = "unreadable: %s" % exc
        return {"type": "symlink", "target": target}
    if stat.S_ISDIR(st.st_mode):
        return {"type": "dir", "mode": _mode(st)}
    if stat.S_ISREG(st.st_mode):
        out = {"type": "file", "size": st.st_size, "mode": _mode(st)}
        try:
            out["sha256"] = _hash_file(path)
        except (IOError, OSError) as exc:
            out["sha256"] = None
            out["error"] = "unreadable: %s" % exc
        return out
    return {"type": "other", "mode": _mode(st)}


def _scan(directory, rel, out, caches):
    """Record ``rel`` and, for a real folder, everything under it into ``out`` (rel path -> entry).
    A folder's ``__pycache__`` is not recorded: its path goes to ``caches`` (checked by content)."""
    entry = _entry(_join(directory, rel))
    out[rel] = entry if entry is not None else dict(MISSING)
    if entry is None or entry["type"] != "dir":
        return
    try:
        names = sorted(os.listdir(_join(directory, rel)))
    except OSError as exc:
        entry["error"] = "unlistable: %s" % exc
        return
    for name in names:
        if name == CACHE_DIR:
            caches.append(rel + "/" + name)
            continue
        _scan(directory, rel + "/" + name, out, caches)


def _static_snapshot(directory, roots, caches=None):
    out = {}
    caches = [] if caches is None else caches
    for root in roots:
        _scan(directory, root, out, caches)
    return out


# Python writes ``__pycache__/<module>.<tag>[.opt-N].pyc`` beside a module it imports, unless told
# not to (PYTHONDONTWRITEBYTECODE=1) or unable to (a read-only folder, unless it runs as root). Such
# a file runs in place of its source, so it is accepted only when its code equals the recorded
# source compiled by this interpreter; anything else in a ``__pycache__`` is a problem.
CACHE_DIR = "__pycache__"
_PYC_RE = re.compile(r"\A(?P<stem>[A-Za-z_][A-Za-z0-9_]*)\.(?P<tag>[A-Za-z0-9_-]+)(?:\.opt-(?P<opt>[12]))?\.pyc\Z")


def _cache_problem(campaign_dir, rel, recorded, found_static):
    """None when ``rel`` (a file in a ``__pycache__``) is Python's own compilation of its recorded,
    unchanged source for this interpreter; else the reason it is refused."""
    folder, name = rel.rsplit("/", 1)
    parent = folder.rsplit("/", 1)[0]
    match = _PYC_RE.match(name)
    if match is None:
        return "not a bytecode cache file name (<module>.<tag>.pyc)"
    source = "%s/%s.py" % (parent, match.group("stem"))
    expected = recorded.get(source)
    if not isinstance(expected, dict) or expected.get("type") != "file":
        return "no recorded source %s for it" % source
    if found_static.get(source) != expected:
        return "its source %s changed" % source
    tag = getattr(sys.implementation, "cache_tag", None)
    if match.group("tag") != tag:
        return ("compiled for %s, which this check (running on %s) cannot compare with its source; run Python "
                "with PYTHONDONTWRITEBYTECODE=1" % (match.group("tag"), tag))
    entry = _entry(_join(campaign_dir, rel))
    if entry is None or entry["type"] != "file":
        return "%s, not a file" % _describe(entry)
    try:
        data = _read_bytes(_join(campaign_dir, rel))
        source_bytes = _read_bytes(_join(campaign_dir, source))
    except (IOError, OSError) as exc:
        return "unreadable: %s" % exc
    if data[:4] != importlib.util.MAGIC_NUMBER or len(data) < 16:
        return "not a bytecode file of this interpreter (magic number differs)"
    if _sha256(source_bytes).hexdigest() != expected.get("sha256"):
        return "its source %s changed" % source
    try:
        cached = marshal.loads(data[16:])
        fresh = compile(source_bytes, _join(campaign_dir, source), "exec", dont_inherit=True,
                        optimize=int(match.group("opt") or 0))
    except Exception as exc:
        return "cannot be compared with its source: %s" % exc
    if cached != fresh:
        return "its code differs from its source %s compiled here" % source
    return None


def _cache_files(campaign_dir, caches):
    for rel in caches:
        try:
            names = sorted(os.listdir(_join(campaign_dir, rel)))
        except OSError:
            continue
        for name in names:
            yield rel + "/" + name


def _bless_caches(campaign_dir, caches, static):
    """The SHA-256 of each bytecode cache present at record time that is Python's own compilation of
    its source (checked by compiling it once, here), so that later checks need not compile again."""
    out = {}
    for path in _cache_files(campaign_dir, caches):
        if _cache_problem(campaign_dir, path, static, static) is None:
            out[path] = _hash_file(_join(campaign_dir, path))
    return out


def _verify_caches(campaign_dir, caches, recorded, found_static, blessed=None):
    problems = []
    blessed = blessed or {}
    for rel in caches:
        entry = _entry(_join(campaign_dir, rel))
        if entry is None:
            continue
        if entry["type"] != "dir":
            problems.append(_problem(rel, "symlink" if entry["type"] == "symlink" else "type", "a bytecode cache folder",
                                     _describe(entry), "%s: a %s where Python keeps its bytecode cache" % (rel, _describe(entry))))
            continue
        try:
            names = sorted(os.listdir(_join(campaign_dir, rel)))
        except OSError as exc:
            problems.append(_problem(rel, "added", "missing", "unlistable: %s" % exc,
                                     "%s: a bytecode cache folder that cannot be listed: %s" % (rel, exc)))
            continue
        for name in names:
            path = rel + "/" + name
            if path in blessed and _blessed_ok(campaign_dir, path, blessed[path], recorded, found_static):
                continue
            reason = _cache_problem(campaign_dir, path, recorded, found_static)
            if reason is not None:
                problems.append(_problem(path, "added", "missing or Python's compilation of the recorded source",
                                         _describe(_entry(_join(campaign_dir, path))),
                                         "%s: file added to a protected tree: %s (a forged .pyc runs in place of its "
                                         "source)" % (path, reason)))
    return problems


def _blessed_ok(campaign_dir, path, digest, recorded, found_static):
    """A cache checked at record time is still the same file, and its source is unchanged."""
    match = _PYC_RE.match(path.rsplit("/", 1)[1])
    if match is None:
        return False
    source = "%s/%s.py" % (path.rsplit("/", 1)[0].rsplit("/", 1)[0], match.group("stem"))
    if found_static.get(source) != recorded.get(source):
        return False
    try:
        return _hash_file(_join(campaign_dir, path)) == digest
    except (IOError, OSError):
        return False


def _prompt_snapshot(directory):
    out = {}
    for name in SESSION_PROTECTED:
        entry = _entry(_join(directory, name))
        out[name] = entry if entry is not None else dict(MISSING)
    return out


def _describe(entry):
    if entry is None or entry.get("type") == "missing":
        return "missing"
    kind = entry.get("type")
    if kind == "file":
        return "file sha256=%s size=%s mode=%s" % (entry.get("sha256"), entry.get("size"), entry.get("mode"))
    if kind == "symlink":
        return "symlink -> %s" % entry.get("target")
    if kind == "dir":
        return "directory mode=%s" % entry.get("mode")
    return "%s %s" % (kind, entry.get("error") or "mode=%s" % entry.get("mode"))


def _short(digest):
    return (digest or "none")[:12]


def _problem(what, rule, expected, found, message):
    return {"what": what, "expected": expected, "found": found, "rule": rule, "message": message}


def _compare(what, expected, found, rule_override=None, check_mode=True):
    """Problems between a recorded entry and what is there now (both dicts; MISSING for absent)."""
    out = []
    exp_type = expected.get("type")
    found_type = found.get("type")

    def add(rule, message, exp=None, fnd=None):
        out.append(_problem(what, rule_override or rule, exp if exp is not None else _describe(expected),
                            fnd if fnd is not None else _describe(found), message))

    if found_type == "missing":
        if exp_type != "missing":
            add("deleted", "%s: protected %s was deleted" % (what, "folder" if exp_type == "dir" else "file"))
        return out
    if exp_type == "missing":
        add("added", "%s: %s added to a protected tree where the record has nothing" % (
            what, "folder" if found_type == "dir" else found_type))
        return out
    if found_type != exp_type:
        if found_type == "symlink":
            add("symlink", "%s: protected %s replaced by a symlink to %s" % (what, exp_type, found.get("target")))
        elif exp_type == "symlink":
            add("symlink", "%s: protected symlink (-> %s) replaced by a %s" % (what, expected.get("target"), found_type))
        else:
            add("type", "%s: protected %s replaced by a %s" % (what, exp_type, found_type))
        return out
    if found_type == "symlink":
        if found.get("target") != expected.get("target"):
            add("symlink", "%s: symlink re-pointed from %s to %s" % (what, expected.get("target"), found.get("target")),
                "symlink -> %s" % expected.get("target"), "symlink -> %s" % found.get("target"))
        return out
    if found_type == "file" and (found.get("sha256") != expected.get("sha256") or found.get("size") != expected.get("size")):
        add("changed", "%s: protected file changed: SHA-256 %s -> %s, %s -> %s bytes" % (
            what, _short(expected.get("sha256")), _short(found.get("sha256")), expected.get("size"), found.get("size")),
            "sha256=%s size=%s" % (expected.get("sha256"), expected.get("size")),
            "sha256=%s size=%s%s" % (found.get("sha256"), found.get("size"),
                                      " (%s)" % found["error"] if found.get("error") else ""))
    if check_mode and found.get("mode") != expected.get("mode"):
        add("mode", "%s: permissions changed from %s to %s" % (what, expected.get("mode"), found.get("mode")),
            "mode %s" % expected.get("mode"), "mode %s" % found.get("mode"))
    return out


def _verify_static(campaign_dir, recorded, roots, blessed=None):
    caches = []
    found = _static_snapshot(campaign_dir, roots, caches)
    problems = _verify_caches(campaign_dir, caches, recorded, found, blessed)
    skip = []  # folders deleted or added whole: their contents are summed up in one problem
    for what in sorted(set(recorded) | set(found)):
        if any(what.startswith(prefix + "/") for prefix in skip):
            continue
        expected = recorded.get(what, MISSING)
        now = found.get(what, MISSING)
        if not isinstance(expected, dict):
            expected = {"type": "unknown"}
        found_problems = _compare(what, expected, now)
        for problem in found_problems:
            if problem["rule"] in ("deleted", "added", "type", "symlink") and "dir" in (expected.get("type"), now.get("type")):
                inside = [p for p in set(recorded) | set(found) if p.startswith(what + "/")]
                if inside:
                    skip.append(what)
                    problem["message"] += " (with %d path(s) inside it)" % len(inside)
        problems.extend(found_problems)
    return problems
