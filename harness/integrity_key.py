"""The integrity record's key: what makes a record the agent wrote itself fail, even over records rewritten to match it.

The record (``.attune/integrity.json``) carries ``mac``, an HMAC-SHA256 of its canonical JSON under a key of 32
random bytes kept outside the campaign, in ``$ATTUNE_KEY_DIR`` (default ``$XDG_STATE_HOME/attune/keys``, else
``~/.local/state/attune/keys``), one file per campaign, named in the record (``key_id``). The agent's Bash sandbox
denies reading that folder and its file tools are denied it too (``sandbox.py``), and no verb reads it, so code
the agent runs cannot sign a record: a campaign whose records were rewritten together with a fresh
``integrity.json`` fails ``verify`` (rule ``record``) at its next launch.

Standard library only and Python 3.7 syntax (the Stop hook imports ``integrity``, which imports this).
"""

import errno
import hashlib
import hmac
import json
import os
import re
import uuid

KEY_DIR_ENV = "ATTUNE_KEY_DIR"
KEY_BYTES = 32
_KEY_ID_RE = re.compile(r"\A[0-9a-f]{32}\Z")


class KeyProblem(ValueError):
    """The key cannot be used: missing, unreadable, a link, or of the wrong size (the message says which)."""


def key_dir(env=None):
    """The folder the campaigns' integrity keys live in (absolute)."""
    env = os.environ if env is None else env
    chosen = env.get(KEY_DIR_ENV)
    if chosen:
        return os.path.abspath(os.path.expanduser(chosen))
    state = env.get("XDG_STATE_HOME")
    if not state or not os.path.isabs(state):
        home = env.get("HOME") or os.path.expanduser("~")
        state = os.path.join(home, ".local", "state")
    return os.path.join(state, "attune", "keys")


def new_key_id():
    return uuid.uuid4().hex


def key_path(key_id, env=None):
    if not isinstance(key_id, str) or not _KEY_ID_RE.match(key_id):
        raise KeyProblem("the record's key_id %r is not a key name (32 hex digits)" % (key_id,))
    return os.path.join(key_dir(env), key_id + ".key")


def create(key_id, env=None):
    """Make the key ``key_id`` (32 random bytes, mode 0600, in a 0700 folder); return it. An existing key is
    never replaced."""
    path = key_path(key_id, env)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o700)
    key = os.urandom(KEY_BYTES)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            return load(key_id, env)
        raise KeyProblem("cannot create the integrity key %s: %s" % (path, exc.strerror or exc))
    try:
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    return key


def load(key_id, env=None):
    """The key ``key_id``; ``KeyProblem`` naming the file and what is wrong."""
    path = key_path(key_id, env)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise KeyProblem("the campaign's integrity key %s is gone (the key the record was signed with; %s "
                            "chooses its folder)" % (path, KEY_DIR_ENV))
        if exc.errno == errno.ELOOP:
            raise KeyProblem("the integrity key %s is a symbolic link" % path)
        raise KeyProblem("the integrity key %s cannot be read: %s" % (path, exc.strerror or exc))
    try:
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise KeyProblem("the integrity key %s holds %d bytes, not %d" % (path, len(key), KEY_BYTES))
    return key


def canonical(record):
    """The bytes the MAC covers: the record without ``mac``, as JSON with sorted keys (what a reader of the written
    file gets back)."""
    body = dict((k, v) for k, v in record.items() if k != "mac")
    body = json.loads(json.dumps(body, default=str))
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def sign(record, key):
    return hmac.new(key, canonical(record), hashlib.sha256).hexdigest()


def check(record, env=None):
    """None when the record's ``mac`` is the HMAC of its content under its campaign's key; else why not."""
    mac = record.get("mac")
    if not isinstance(mac, str):
        return ("the record carries no MAC: it was not written by the launcher (an unkeyed record, from an older "
                "ATTUNE or by hand, is not accepted)")
    try:
        key = load(record.get("key_id"), env)
    except KeyProblem as exc:
        return str(exc)
    if not hmac.compare_digest(mac, sign(record, key)):
        return ("its MAC does not match the campaign's key: the record was rewritten by something other than the "
                "launcher")
    return None
