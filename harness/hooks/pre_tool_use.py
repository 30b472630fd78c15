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
* Writes to protected campaign paths (``campaign_files.PROTECTED``) are denied: Edit, Write,
  MultiEdit, NotebookEdit, and in Bash redirections, tee, sed -i, mv, cp, rm, ln, chmod, touch,
  truncate, dd, install, rsync, find -delete and interpreter one-liners that write and name a
  protected file. ``attune`` verbs write the records; they are allowed.
* WebFetch and WebSearch are denied when ``AUTOTUNE_ALLOW_WEB`` is off. Everything else is allowed.

Standard library only; runs on Python 3.7.
"""

import fnmatch
import glob
import json
import os
import re
import shlex
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
try:
    import campaign_files
    _IMPORT_ERROR = None
except Exception as _exc:  # the guard must still answer (deny) rather than crash and fail open
    campaign_files = None
    _IMPORT_ERROR = "%s: %s" % (type(_exc).__name__, _exc)

NOT_A_BOUNDARY = "the guard prevents accidents; it is not a security boundary"
MARK = "\x00"  # stands in a word for text the guard cannot know: a variable, a substitution, xargs input
MAX_DEPTH = 16
MAX_READ = 4 * 1024 * 1024
MAX_COMMAND = 1024 * 1024
_FALSE = ("0", "false", "no", "off")
_NOTES = "keep your own notes in notes.md or scratch/"


class _Deny(Exception):
    def __init__(self, reason):
        Exception.__init__(self, reason)
        self.reason = reason


class _Unparsable(Exception):
    pass


# ------------------------------------------------------------------------------------------- lexer
class Word(object):
    """One shell word after quote removal. ``text`` has MARK where the value is unknown."""

    __slots__ = ("text", "raw", "glob", "brace")

    def __init__(self, text, raw=None, glob_=False, brace=False):
        self.text = text
        self.raw = text if raw is None else raw
        self.glob = glob_
        self.brace = brace

    @property
    def known(self):
        return MARK not in self.text

    def __repr__(self):
        return "Word(%r)" % self.text


class Redir(object):
    __slots__ = ("op", "fd", "target", "body", "quoted")

    def __init__(self, op, fd, target):
        self.op = op
        self.fd = fd
        self.target = target
        self.body = None
        self.quoted = False

    @property
    def writes(self):
        """Whether the redirection opens its target for writing."""
        if self.op in (">", ">>", ">|", "&>", "&>>", "<>"):
            return True
        if self.op == ">&":
            return not re.match(r"^([0-9]+|-)$", self.target.text)
        return False


_OPS = ("<<<", "<<-", "&>>", ";;&", "&&", "||", ";;", ";&", "|&", "&>", ">>", ">|", ">&", "<<", "<>", "<&",
        ">", "<", "|", "&", ";", "(", ")")
_REDIR_OPS = frozenset(("<<<", "<<-", "&>>", "&>", ">>", ">|", ">&", "<<", "<>", "<&", ">", "<"))
_WORD_END = frozenset(" \t\r\n;&|()<>")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")


def _heredoc_delim(s, j):
    """At ``s[j:]`` == "<<...": (delimiter, strips tabs, index after the delimiter word)."""
    j += 2
    strip = s.startswith("-", j)
    if strip:
        j += 1
    while j < len(s) and s[j] in " \t":
        j += 1
    out = []
    while j < len(s) and s[j] not in " \t\n;&|()<>":
        c = s[j]
        if c in "'\"":
            end = s.find(c, j + 1)
            if end < 0:
                raise _Unparsable("unbalanced quote in a here-document delimiter")
            out.append(s[j + 1:end])
            j = end + 1
        elif c == "\\":
            out.append(s[j + 1:j + 2])
            j += 2
        else:
            out.append(c)
            j += 1
    return "".join(out), strip, j


def _skip_heredoc_bodies(s, j, pending):
    """From the start of the line after a here-document operator, skip the bodies."""
    for delim, strip in pending:
        while j < len(s):
            end = s.find("\n", j)
            line = s[j:] if end < 0 else s[j:end]
            j = len(s) if end < 0 else end + 1
            if (line.lstrip("\t") if strip else line).rstrip("\r") == delim:
                break
    return j


def _close(s, j, opening, closing):
    """Index of the bracket closing the one just before ``s[j]``; quotes, escapes and
    here-document bodies are skipped."""
    depth = 1
    n = len(s)
    pending = []
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "\n" and pending:
            j = _skip_heredoc_bodies(s, j + 1, pending)
            pending = []
            continue
        if c == "<" and s.startswith("<<", j) and not s.startswith("<<<", j):
            delim, strip, j = _heredoc_delim(s, j)
            pending.append((delim, strip))
            continue
        if c == "'":
            end = s.find("'", j + 1)
            if end < 0:
                raise _Unparsable("unbalanced single quote")
            j = end + 1
            continue
        if c == '"':
            j = _skip_dquote(s, j + 1)
            continue
        if c == "`":
            j = _skip_backtick(s, j + 1) + 1
            continue
        if c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    raise _Unparsable("unbalanced %s ... %s" % (opening, closing))


def _skip_dquote(s, j):
    n = len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == '"':
            return j + 1
        if c == "$" and s.startswith("(", j + 1):
            j = _close(s, j + 2, "(", ")") + 1
            continue
        if c == "`":
            j = _skip_backtick(s, j + 1) + 1
            continue
        j += 1
    raise _Unparsable("unbalanced double quote")


def _skip_backtick(s, j):
    n = len(s)
    while j < n:
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == "`":
            return j
        j += 1
    raise _Unparsable("unbalanced backtick")


_ANSI = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b", "E": "\x1b",
         "\\": "\\", "'": "'", '"': '"', "?": "?"}


class _Lexer(object):
    """A shell lexer: words (quotes removed, unknown parts as MARK), operators and redirections.

    The texts of command substitutions, backticks and process substitutions are collected in
    ``subs`` to be checked as commands of their own; here-document bodies are attached to their
    redirections (expanded unless the delimiter is quoted)."""

    def __init__(self, text):
        self.s = text
        self.n = len(text)
        self.i = 0
        self.tokens = []
        self.subs = []
        self._pending = []
        self._word_end = -1

    def run(self):
        s = self.s
        while self.i < self.n:
            c = s[self.i]
            if c in " \t\r\f\v":
                self.i += 1
            elif c == "\\" and s.startswith("\\\n", self.i):
                self.i += 2
            elif c == "\n":
                self.tokens.append(("op", "\n"))
                self.i += 1
                self._read_heredocs()
            elif c == "#":
                end = s.find("\n", self.i)
                self.i = self.n if end < 0 else end
            elif c in "<>" and s.startswith("(", self.i + 1):
                start = self.i
                end = _close(s, self.i + 2, "(", ")")
                self.subs.append(s[self.i + 2:end])
                self.i = end + 1
                self.tokens.append(("word", Word(MARK, s[start:self.i])))
            elif c in ";&|()<>":
                self._operator()
            else:
                word = self._word()
                self._word_end = self.i
                self.tokens.append(("word", word))
        if self._pending:
            self._read_heredocs()
        return self

    def _operator(self):
        s = self.s
        start = self.i
        op = None
        for candidate in _OPS:
            if s.startswith(candidate, start):
                op = candidate
                break
        self.i = start + len(op)
        if op not in _REDIR_OPS:
            self.tokens.append(("op", op))
            return
        fd = None
        if (self.tokens and self.tokens[-1][0] == "word" and self._word_end == start
                and re.match(r"^[0-9]+$", self.tokens[-1][1].raw)):
            fd = self.tokens.pop()[1].text
        while self.i < self.n and s[self.i] in " \t":
            self.i += 1
        if self.i >= self.n or s[self.i] in "\n;&|()<>":
            raise _Unparsable("the redirection %s has no target" % op)
        target = self._word()
        redir = Redir(op, fd, target)
        if op in ("<<", "<<-"):
            redir.quoted = any(q in target.raw for q in "'\"\\")
            self._pending.append(redir)
        self.tokens.append(("redir", redir))

    def _read_heredocs(self):
        pending, self._pending = self._pending, []
        for redir in pending:
            delim = redir.target.text
            strip = redir.op == "<<-"
            lines = []
            while self.i < self.n:
                end = self.s.find("\n", self.i)
                line = self.s[self.i:] if end < 0 else self.s[self.i:end]
                self.i = self.n if end < 0 else end + 1
                if strip:
                    line = line.lstrip("\t")
                if line.rstrip("\r") == delim:
                    break
                lines.append(line)
            body = "".join(line + "\n" for line in lines)
            redir.body = body if redir.quoted else self._expand(body)

    def _expand(self, text):
        """``text`` with its expansions as MARK (a here-document body, the inside of ``${...}``)."""
        inner = _Lexer(text)
        out = []
        while inner.i < inner.n:
            c = text[inner.i]
            if c == "\\" and inner.i + 1 < inner.n and text[inner.i + 1] in "$`\\\n":
                if text[inner.i + 1] != "\n":
                    out.append(text[inner.i + 1])
                inner.i += 2
            elif c == "$":
                out.append(inner._dollar(True))
            elif c == "`":
                out.append(inner._backtick())
            else:
                out.append(c)
                inner.i += 1
        self.subs.extend(inner.subs)
        return "".join(out)

    def _word(self):
        s = self.s
        start = self.i
        out = []
        glob_ = brace = False
        while self.i < self.n:
            c = s[self.i]
            if c in _WORD_END:
                break
            if c == "\\":
                if self.i + 1 < self.n and s[self.i + 1] != "\n":
                    out.append(s[self.i + 1])
                self.i += 2
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise _Unparsable("unbalanced single quote")
                out.append(s[self.i + 1:end])
                self.i = end + 1
            elif c == '"':
                self.i += 1
                out.append(self._dquote())
            elif c == "$":
                out.append(self._dollar(False))
            elif c == "`":
                out.append(self._backtick())
            else:
                if c in "*?[":
                    glob_ = True
                elif c == "{":
                    brace = True
                out.append(c)
                self.i += 1
        return Word("".join(out), s[start:self.i], glob_, brace)

    def _dquote(self):
        s = self.s
        out = []
        while self.i < self.n:
            c = s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\\" and self.i + 1 < self.n and s[self.i + 1] in '$`"\\\n':
                if s[self.i + 1] != "\n":
                    out.append(s[self.i + 1])
                self.i += 2
            elif c == "$":
                out.append(self._dollar(True))
            elif c == "`":
                out.append(self._backtick())
            else:
                out.append(c)
                self.i += 1
        raise _Unparsable("unbalanced double quote")

    def _dollar(self, quoted):
        s = self.s
        i = self.i
        nxt = s[i + 1] if i + 1 < self.n else ""
        if nxt == "(":
            end = _close(s, i + 2, "(", ")")
            inner = s[i + 2:end]
            if inner.startswith("(") and inner.endswith(")"):  # $(( arithmetic ))
                self._expand(inner[1:-1])
            else:
                self.subs.append(inner)
            self.i = end + 1
            return MARK
        if nxt in ("{", "["):
            end = _close(s, i + 2, nxt, "}" if nxt == "{" else "]")
            self._expand(s[i + 2:end])
            self.i = end + 1
            return MARK
        if nxt == "'" and not quoted:
            return self._ansi_c()
        if nxt == '"' and not quoted:
            self.i += 2
            return self._dquote()
        match = _NAME_RE.match(s, i + 1)
        if match:
            self.i = match.end()
            return MARK
        self.i += 1
        return "$"

    def _ansi_c(self):
        s = self.s
        j = self.i + 2
        out = []
        while j < self.n:
            c = s[j]
            if c == "'":
                self.i = j + 1
                return "".join(out)
            if c != "\\" or j + 1 >= self.n:
                out.append(c)
                j += 1
                continue
            e = s[j + 1]
            if e in _ANSI:
                out.append(_ANSI[e])
                j += 2
                continue
            m = None
            if e == "x":
                m = re.compile(r"[0-9a-fA-F]{1,2}").match(s, j + 2)
                base = 16
            elif e in "01234567":
                m = re.compile(r"[0-7]{1,3}").match(s, j + 1)
                base = 8
            elif e in "uU":
                m = re.compile(r"[0-9a-fA-F]{1,%d}" % (4 if e == "u" else 8)).match(s, j + 2)
                base = 16
            elif e == "c" and j + 2 < self.n:
                out.append(chr(ord(s[j + 2]) & 0x1f))
                j += 3
                continue
            if m:
                try:
                    out.append(chr(int(m.group(0), base)))
                except (ValueError, OverflowError):
                    out.append(MARK)
                j = m.end()
                continue
            out.append("\\" + e)
            j += 2
        raise _Unparsable("unbalanced $'...' quote")

    def _backtick(self):
        end = _skip_backtick(self.s, self.i + 1)
        inner = re.sub(r"\\([$`\\])", r"\1", self.s[self.i + 1:end])
        self.subs.append(inner)
        self.i = end + 1
        return MARK


class _Command(object):
    __slots__ = ("words", "redirs", "pipe_from")

    def __init__(self, pipe_from):
        self.words = []
        self.redirs = []
        self.pipe_from = pipe_from


def _parse(tokens):
    """Simple commands in order; ``(`` and ``)`` become ("push", None) / ("pop", None) marks."""
    items = []
    cur = _Command(None)
    for tok in tokens:
        if tok[0] == "word":
            cur.words.append(tok[1])
        elif tok[0] == "redir":
            cur.redirs.append(tok[1])
        else:
            op = tok[1]
            empty = not cur.words and not cur.redirs
            if not empty:
                items.append(("cmd", cur))
            if op == "(":
                items.append(("push", None))
            elif op == ")":
                items.append(("pop", None))
            cur = _Command(cur if (op in ("|", "|&") and not empty) else None)
    if cur.words or cur.redirs:
        items.append(("cmd", cur))
    return items


# ------------------------------------------------------------------------------------------ context
class _Ctx(object):
    def __init__(self, campaign, settings, cwd, text):
        self.campaign = campaign
        self.settings = settings
        self.event_cwd = cwd
        self.bases = [cwd]  # where relative paths may resolve (more than one after an unknown cd)
        self.root_text = text
        self.aliases = {}
        self.virtual = {}  # path -> text written earlier in this command (None: unknown text)
        self.expanding = set()

    def setting(self, name, default=""):
        value = self.settings.get(name)
        return default if value is None else value


def _show(text):
    return text.replace(MARK, "${...}")


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_GLOB_CHARS = re.compile(r"[*?\[]")


def _mentions_kubectl(text):
    flat = re.sub(r"[\\'\"]", "", text).lower()
    return "kubectl" in flat or ("kube" in flat and "ctl" in flat)


def _mention_pattern():
    parts = []
    for entry in sorted(set(e.rstrip("/") for e in campaign_files.PROTECTED), key=len, reverse=True):
        if campaign_files.PROTECTED.count(entry + "/") and entry != ".attune":
            # a directory with a common name (runs): only as a path component
            parts.append(r"(?<![\w.-])%s(?=/)|['\"]%s['\"]" % (re.escape(entry), re.escape(entry)))
        else:
            parts.append(r"(?<![\w.-])%s(?![\w-])" % re.escape(entry))
    return re.compile("|".join(parts))


_MENTION = None


def _mentions_protected(text):
    global _MENTION
    if _MENTION is None:
        _MENTION = _mention_pattern()
    return _MENTION.search(text)


# ------------------------------------------------------------------------------------- path checks
def _protected_reason(rel, how, path):
    top = rel.replace(os.sep, "/").split("/")[0]
    if rel == ".":
        what = "that would change the campaign directory itself or a folder holding it"
    elif top == ".attune":
        what = "the campaign's own state (.attune/) is written only by the launcher and the attune verbs"
    elif top == "runs":
        what = "runs/ is written only by attune verbs (attune candidate new, launch, finalize, gate)"
    elif top in ("RESULTS.md", "results_throughput.png"):
        what = "RESULTS.md and its chart are regenerated by `attune rank`"
    elif top in ("REPORT.md", "recipe.yaml"):
        what = "REPORT.md and recipe.yaml are written by `attune report`"
    elif top in campaign_files.SESSION_PROTECTED:
        what = "the session prompts are set by the launcher between sessions"
    else:
        what = "it is a campaign record (add a note to the ledger with `attune note TEXT`)"
    return ("guard: %s %s denied: %s is protected; %s. Records are written only by attune verbs; %s."
            % (how, _show(path), rel if rel != "." else "the campaign directory", what, _NOTES))


def _protected_rel(ctx, path, base):
    """The campaign-relative protected path that writing ``path`` touches ("." for the campaign
    directory or a folder holding it), else None."""
    if path.startswith("/dev/"):
        return None
    rel = campaign_files.relative(ctx.campaign, path, base)
    if rel is None:
        full = os.path.realpath(os.path.join(base, os.path.expanduser(path)))
        root = os.path.realpath(ctx.campaign)
        return "." if root.startswith(full.rstrip(os.sep) + os.sep) else None
    return rel if campaign_files.is_protected(rel) else None


def _split_top(text, sep):
    parts = []
    depth = 0
    quote = None
    cur = []
    for c in text:
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(c)
    parts.append("".join(cur))
    return parts


def _brace_expand(text, limit=256):
    depth = 0
    start = None
    for idx, c in enumerate(text):
        if c == "{":
            if depth == 0:
                start = idx
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                parts = _split_top(text[start + 1:idx], ",")
                if len(parts) > 1:
                    out = []
                    for part in parts:
                        out.extend(_brace_expand(text[:start] + part + text[idx + 1:], limit))
                        if len(out) >= limit:
                            break
                    return out[:limit]
    return [text]


def _expansions(word, base):
    texts = _brace_expand(word.text) if word.brace else [word.text]
    out = []
    for text in texts:
        if word.glob and _GLOB_CHARS.search(text):
            out.extend(glob.glob(os.path.join(base, os.path.expanduser(text)))[:5000])
        out.append(text)
    return out


def _unknown_path_risky(ctx, text):
    """Whether a path with unknown parts may be a protected campaign file."""
    tail = text.rsplit(MARK, 1)[1]
    parts = [p for p in tail.split("/") if p not in ("", ".")]
    for k in range(len(parts)):
        if campaign_files.is_protected("/".join(parts[k:])):
            return True
    if tail.startswith("/") and parts:
        return False  # an unknown folder holding a named, unprotected file
    head = text.split(MARK, 1)[0]
    for base in ctx.bases:
        directory = os.path.dirname(os.path.join(base, os.path.expanduser(head))) if head else base
        rel = campaign_files.relative(ctx.campaign, directory)
        if rel is None:
            root = os.path.realpath(ctx.campaign)
            if root.startswith(os.path.realpath(directory).rstrip(os.sep) + os.sep):
                return True
            continue
        if rel == "." or campaign_files.is_protected(rel):
            return True
    return bool(_mentions_protected(ctx.root_text))


def _check_path(ctx, path, base, how):
    rel = _protected_rel(ctx, path, base)
    if rel is not None:
        raise _Deny(_protected_reason(rel, how, path))


def _check_write(ctx, word, how):
    """Deny when writing (or removing) the path ``word`` could touch a protected campaign path."""
    if word is None:
        return
    if not word.known:
        if _unknown_path_risky(ctx, word.text):
            raise _Deny("guard: %s %s denied: the guard cannot tell where this path points and it may be a "
                        "protected campaign file. Records are written only by attune verbs; write the path out, "
                        "and %s." % (how, _show(word.text), _NOTES))
        return
    for base in ctx.bases:
        for path in _expansions(word, base):
            _check_path(ctx, path, base, how)


def _check_dest(ctx, dest, sources, how, contents_on_slash=False):
    """The destination of cp/mv/ln/install/rsync: a file, or a folder receiving the sources
    (``contents_on_slash``: rsync copies the contents of a source written with a trailing slash)."""
    if dest is None:
        return
    if not dest.known:
        _check_write(ctx, dest, how)
        return
    for base in ctx.bases:
        full = os.path.join(base, os.path.expanduser(dest.text))
        if not (os.path.isdir(full) or dest.text.endswith("/")):
            _check_path(ctx, dest.text, base, how)
            continue
        rel = _protected_rel(ctx, dest.text, base)
        if rel is not None and rel != ".":  # into a protected folder (the campaign root may take free files)
            raise _Deny(_protected_reason(rel, how, dest.text))
        for src in sources:
            if not src.known:
                _check_write(ctx, Word(dest.text.rstrip("/") + "/" + MARK), how)
                continue
            names = []
            for path in _expansions(src, base):
                folder = os.path.join(base, os.path.expanduser(path))
                if contents_on_slash and path.endswith("/") and os.path.isdir(folder):
                    try:
                        names.extend(os.listdir(folder))
                    except OSError:
                        names.append(MARK)
                else:
                    names.append(os.path.basename(path.rstrip("/")))
            for name in names:
                if name == MARK:
                    _check_write(ctx, Word(dest.text.rstrip("/") + "/" + MARK), how)
                else:
                    _check_path(ctx, os.path.join(full, name), base, how)


def _resolve(ctx, text):
    return os.path.normpath(os.path.join(ctx.bases[0], os.path.expanduser(text)))


def _read_real(path):
    try:
        if os.path.isfile(path) and os.path.getsize(path) <= MAX_READ:
            with open(path, "rb") as handle:
                return handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        pass
    return None


def _read_path(ctx, word):
    """A file's text: what this command wrote to it earlier, else the file on disk; None if unknown."""
    if word is None or not word.known:
        return None
    path = _resolve(ctx, word.text)
    if path in ctx.virtual:
        return ctx.virtual[path]
    return _read_real(path)


def _read_virtual(ctx, word):
    """A script written earlier in this same command (a here-document into a file), else None."""
    if word is None or not word.known:
        return None
    return ctx.virtual.get(_resolve(ctx, word.text))


# ------------------------------------------------------------------------------ command analysis
def _nested(text, ctx, depth):
    """Check ``text`` as a shell script run from here (its cd's do not leak out)."""
    saved = list(ctx.bases)
    try:
        _analyze_text(text, ctx, depth)
    finally:
        ctx.bases = saved


def _analyze_text(text, ctx, depth):
    if depth > MAX_DEPTH:
        raise _Deny("guard: the command nests shells, substitutions, aliases or evals too deeply to check; "
                    "write it more plainly (%s)." % NOT_A_BOUNDARY)
    lexer = _Lexer(text).run()
    for sub in lexer.subs:
        _nested(sub, ctx, depth + 1)
    stack = []
    for kind, cmd in _parse(lexer.tokens):
        if kind == "push":
            stack.append(list(ctx.bases))
        elif kind == "pop":
            if stack:
                ctx.bases = stack.pop()
        else:
            _analyze_command(cmd, ctx, depth)


_RESERVED = frozenset(("!", "{", "}", "then", "do", "else", "elif", "if", "while", "until", "fi", "done", "esac"))
_NOT_COMMANDS = frozenset(("for", "case", "select", "function", "[[", "]]"))


def _kubeconfig_reason(ctx):
    return ("guard: the campaign uses the default kubeconfig; KUBECONFIG and --kubeconfig are not allowed. "
            "Drop them and pass --context %s -n %s." % (ctx.setting("ATTUNE_KUBE_CONTEXT") or "CONTEXT",
                                                       ctx.setting("ATTUNE_NAMESPACE") or "NAMESPACE"))


def _analyze_command(cmd, ctx, depth):
    for redir in cmd.redirs:
        if redir.writes:
            _check_write(ctx, redir.target, "writing with %s into" % redir.op)
    words = list(cmd.words)
    while words and words[0].text in _RESERVED and words[0].raw == words[0].text:
        words.pop(0)
    if words and words[0].text in _NOT_COMMANDS:
        return
    env = {}
    while words and _ASSIGN.match(words[0].raw):
        name = re.split(r"[\[+=]", words[0].raw, maxsplit=1)[0]
        if name == "KUBECONFIG":
            raise _Deny(_kubeconfig_reason(ctx))
        env[name] = words[0].text.split("=", 1)[1] if "=" in words[0].text else ""
        words.pop(0)
    if not words:
        return
    stdin = _stdin_of(cmd, ctx)
    _run(words, env, stdin, ctx, depth)
    _record_output(cmd, words, stdin, ctx)


def _stdin_of(cmd, ctx):
    """The text the command reads on stdin when the guard can know it, else None."""
    have = False
    text = None
    for redir in cmd.redirs:
        if redir.op in ("<<", "<<-"):
            have, text = True, redir.body
        elif redir.op == "<<<":
            have, text = True, redir.target.text + "\n"
        elif redir.op == "<" and redir.fd in (None, "0"):
            have, text = True, _read_path(ctx, redir.target)
    if have:
        return text
    if cmd.pipe_from is not None:
        prev = cmd.pipe_from
        if any(r.writes and r.fd in (None, "1") for r in prev.redirs):
            return ""  # its output goes to a file, not down the pipe
        return _produced(prev, ctx)
    return None


def _produced(cmd, ctx):
    """What a simple command prints, for the few commands where that is plain (cat, echo, printf, tee)."""
    words = list(cmd.words)
    while words and _ASSIGN.match(words[0].raw):
        words.pop(0)
    if not words or not words[0].known:
        return None
    prog = os.path.basename(words[0].text)
    args = words[1:]
    if prog == "cat":
        files = [a for a in args if a.text == "-" or not a.text.startswith("-")]
        if not files:
            return _stdin_of(cmd, ctx)
        parts = []
        for a in files:
            part = _stdin_of(cmd, ctx) if a.text == "-" else _read_path(ctx, a)
            if part is None:
                return None
            parts.append(part)
        return "".join(parts)
    if prog == "tee":
        return _stdin_of(cmd, ctx)
    if prog == "echo":
        newline = True
        while args and re.match(r"^-[neE]+$", args[0].text):
            newline = newline and "n" not in args[0].text
            args = args[1:]
        return " ".join(a.text for a in args) + ("\n" if newline else "")
    if prog == "printf" and len(args) == 1 and "%" not in args[0].text:
        return args[0].text.replace("\\n", "\n").replace("\\t", "\t")
    return None


def _record_output(cmd, words, stdin, ctx):
    """Remember files this command writes with a known text (a manifest or script written by a
    here-document), so that a later command of the same call reads what it will really find."""
    produced = None
    computed = False
    for redir in cmd.redirs:
        if redir.op in (">", ">|", ">>", "&>", "&>>") and redir.fd in (None, "1") and redir.target.known:
            if not computed:
                produced = _produced(cmd, ctx)
                computed = True
            _remember(ctx, redir.target, produced, redir.op in (">>", "&>>"))
    if words[0].known and os.path.basename(words[0].text) == "tee":
        opts, operands = _split_opts(words[1:])
        append = any(name in ("a", "append") for name, _ in opts)
        for operand in operands:
            if operand.known:
                _remember(ctx, operand, stdin, append)


def _remember(ctx, word, text, append):
    path = _resolve(ctx, word.text)
    if text is not None and append:
        before = ctx.virtual[path] if path in ctx.virtual else _read_real(path)
        text = None if (path in ctx.virtual and before is None) else (before or "") + text
    ctx.virtual[path] = text


def _requote(word):
    return shlex.quote(word.text)


def _unresolvable(ctx, why):
    if _mentions_kubectl(ctx.root_text):
        raise _Deny("guard: cannot parse what this command runs (%s) and it involves kubectl, so the guard cannot "
                    "check it (unparsable). Run kubectl directly, spelled out, with --context %s -n %s."
                    % (why, ctx.setting("ATTUNE_KUBE_CONTEXT") or "CONTEXT",
                       ctx.setting("ATTUNE_NAMESPACE") or "NAMESPACE"))


def _run(words, env, stdin, ctx, depth):
    """Check one command: ``words`` (program first) with its environment assignments and stdin."""
    if depth > MAX_DEPTH:
        raise _Deny("guard: the command nests wrappers too deeply to check; write it more plainly.")
    first = words[0]
    args = words[1:]
    if not first.known:
        _unresolvable(ctx, "its program comes from a variable or a substitution")
        return
    prog = os.path.basename(first.text) if "/" in first.text.rstrip("/") else first.text
    if first.glob and _GLOB_CHARS.search(prog):
        # a pattern as the program (k*ctl); a bare * or ? is a case pattern, not a program
        if re.search(r"[A-Za-z]", prog) and fnmatch.fnmatchcase("kubectl", prog):
            raise _Deny("guard: the program pattern %s may run kubectl (unparsable); spell kubectl out." % prog)
        return
    if prog in ctx.aliases and prog not in ctx.expanding:
        ctx.expanding.add(prog)
        try:
            _nested(ctx.aliases[prog] + "".join(" " + _requote(w) for w in args), ctx, depth + 1)
        finally:
            ctx.expanding.discard(prog)
        return
    handler = _PROGRAMS.get(prog)
    if handler is None and re.match(r"^(python|pypy)[0-9.]*$", prog):
        handler = _python
    if handler is not None:
        handler(prog, args, env, stdin, ctx, depth)


def _split_opts(args, short_val="", long_val=(), stop_at_operand=False):
    """``(options, operands)``: options as ``(name, Word or None)``; ``--`` ends the options."""
    opts = []
    operands = []
    i = 0
    n = len(args)
    only = False
    while i < n:
        w = args[i]
        t = w.text
        if only or t == "-" or not t.startswith("-"):
            operands.append(w)
            if stop_at_operand:
                operands.extend(args[i + 1:])
                break
            i += 1
            continue
        if t == "--":
            only = True
            if stop_at_operand:
                operands.extend(args[i + 1:])
                break
            i += 1
            continue
        if t.startswith("--"):
            name, eq, val = t[2:].partition("=")
            if eq:
                opts.append((name, Word(val)))
            elif name in long_val and i + 1 < n:
                opts.append((name, args[i + 1]))
                i += 1
            else:
                opts.append((name, None))
            i += 1
            continue
        j = 1
        while j < len(t):
            ch = t[j]
            if ch in short_val:
                rest = t[j + 1:]
                if rest:
                    opts.append((ch, Word(rest)))
                elif i + 1 < n:
                    opts.append((ch, args[i + 1]))
                    i += 1
                else:
                    opts.append((ch, None))
                break
            opts.append((ch, None))
            j += 1
        i += 1
    return opts, operands


# ----------------------------------------------------------------------------------------- wrappers
def _wrap(rest, env, stdin, ctx, depth):
    if rest:
        _run(rest, env, stdin, ctx, depth + 1)


def _plain_wrapper(prog, args, env, stdin, ctx, depth):
    _wrap(args, env, stdin, ctx, depth)


def _env(prog, args, env, stdin, ctx, depth):
    env = dict(env)
    i = 0
    n = len(args)
    chdir = None
    split = None
    while i < n:
        t = args[i].text
        if t == "--":
            i += 1
            break
        long_value = re.match(r"^--(unset|chdir|split-string)=(.*)$", t, re.S)
        if t in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string"):
            value = args[i + 1].text if i + 1 < n else ""
            if t in ("-C", "--chdir"):
                chdir = value
            elif t in ("-S", "--split-string"):
                split = value
            i += 2
            continue
        if long_value:
            if long_value.group(1) == "chdir":
                chdir = long_value.group(2)
            elif long_value.group(1) == "split-string":
                split = long_value.group(2)
            i += 1
            continue
        if re.match(r"^-[uCS].", t):
            if t[1] == "C":
                chdir = t[2:]
            elif t[1] == "S":
                split = t[2:]
            i += 1
            continue
        if t.startswith("-") and t != "-":
            i += 1
            continue
        if t == "-":
            i += 1
            continue
        break
    while i < n and _ASSIGN.match(args[i].text):
        name = re.split(r"[\[+=]", args[i].text, maxsplit=1)[0]
        if name == "KUBECONFIG":
            raise _Deny(_kubeconfig_reason(ctx))
        env[name] = args[i].text.split("=", 1)[1]
        i += 1
    rest = args[i:]
    saved = list(ctx.bases)
    try:
        if chdir is not None:
            if MARK in chdir:
                ctx.bases = _unknown_bases(ctx)
            else:
                ctx.bases = [os.path.normpath(os.path.join(b, os.path.expanduser(chdir))) for b in ctx.bases]
        if split is not None:
            _analyze_text(split + "".join(" " + _requote(w) for w in rest), ctx, depth + 1)
        else:
            _wrap(rest, env, stdin, ctx, depth)
    finally:
        ctx.bases = saved


def _timeout(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "sk", ("signal", "kill-after"), stop_at_operand=True)
    _wrap(operands[1:], env, stdin, ctx, depth)


def _nice(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "n", ("adjustment",), stop_at_operand=True)
    _wrap(operands, env, stdin, ctx, depth)


def _sudo(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "ugpChDrTUt", ("user", "group", "prompt", "close-from", "chdir", "role",
                                                    "type", "command-timeout", "other-user", "host"),
                                 stop_at_operand=True)
    env = dict(env)
    while operands and _ASSIGN.match(operands[0].text):
        name = re.split(r"[\[+=]", operands[0].text, maxsplit=1)[0]
        if name == "KUBECONFIG":
            raise _Deny(_kubeconfig_reason(ctx))
        env[name] = operands[0].text.split("=", 1)[1]
        operands = operands[1:]
    _wrap(operands, env, stdin, ctx, depth)


def _doas(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "uC", (), stop_at_operand=True)
    _wrap(operands, env, stdin, ctx, depth)


def _time(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "fo", ("format", "output"), stop_at_operand=True)
    for name, value in opts:
        if name in ("o", "output"):
            _check_write(ctx, value, "time -o writing")
    _wrap(operands, env, stdin, ctx, depth)


def _command(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "", (), stop_at_operand=True)
    if any(name in ("v", "V") for name, _ in opts):
        return  # command -v NAME only looks the name up
    _wrap(operands, env, stdin, ctx, depth)


def _exec(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "a", (), stop_at_operand=True)
    _wrap(operands, env, stdin, ctx, depth)


def _stdbuf(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "ioe", ("input", "output", "error"), stop_at_operand=True)
    _wrap(operands, env, stdin, ctx, depth)


def _ionice(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "cnpPu", ("class", "classdata", "pid", "pgid", "uid"), stop_at_operand=True)
    _wrap(operands, env, stdin, ctx, depth)


def _xargs(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "IELnPsdal", ("replace", "eof", "max-lines", "max-args", "max-procs",
                                                   "max-chars", "delimiter", "arg-file", "process-slot-var"),
                                 stop_at_operand=True)
    replace = None
    for name, value in opts:
        if name in ("I", "replace"):
            replace = value.text if value is not None else "{}"
        elif name == "i":
            replace = "{}"
    words = operands or [Word("echo")]
    if replace:
        words = [Word(w.text.replace(replace, MARK), w.raw, w.glob, w.brace) for w in words]
    else:
        words = words + [Word(MARK, "<xargs input>")]
    _run(words, env, None, ctx, depth + 1)


def _watch(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "nq", ("interval", "differences"), stop_at_operand=True)
    if any(name in ("x", "exec") for name, _ in opts):
        _wrap(operands, env, stdin, ctx, depth)
    elif operands:
        _nested(" ".join(w.text for w in operands), ctx, depth + 1)


def _shell(prog, args, env, stdin, ctx, depth):
    from_stdin = False
    i = 0
    n = len(args)
    while i < n:
        w = args[i]
        t = w.text
        if t in ("--", "-"):
            i += 1
            break
        if t in ("--rcfile", "--init-file"):
            i += 2
            continue
        if t.startswith("--"):
            i += 1
            continue
        if len(t) > 1 and t[0] in "-+" and w.known:
            flags = t[1:]
            if "s" in flags and t[0] == "-":
                from_stdin = True
            if "c" in flags:
                if i + 1 >= n:
                    raise _Unparsable("%s -c without a command" % prog)
                _nested(args[i + 1].text, ctx, depth + 1)
                return
            i += 2 if ("o" in flags or "O" in flags) else 1
            continue
        break
    operands = args[i:]
    if operands and not from_stdin:
        script = _read_virtual(ctx, operands[0])
        if script is not None:
            _nested(script, ctx, depth + 1)
        elif not operands[0].known:
            _unresolvable(ctx, "%s runs a script named by a variable" % prog)
        return
    if stdin is not None:
        _nested(stdin, ctx, depth + 1)
    else:
        _unresolvable(ctx, "%s reads its commands from input the guard cannot see" % prog)


def _eval(prog, args, env, stdin, ctx, depth):
    text = " ".join(w.text for w in args)
    if _mentions_kubectl(text) or (MARK in text and _mentions_kubectl(ctx.root_text)):
        raise _Deny("guard: eval hides what runs and this command involves kubectl, so the guard cannot check it "
                    "(unparsable). Run kubectl directly, spelled out, with --context %s -n %s."
                    % (ctx.setting("ATTUNE_KUBE_CONTEXT") or "CONTEXT", ctx.setting("ATTUNE_NAMESPACE") or "NAMESPACE"))
    _nested(text, ctx, depth + 1)


def _source(prog, args, env, stdin, ctx, depth):
    if not args:
        return
    script = _read_virtual(ctx, args[0])
    if script is not None:
        _analyze_text(script, ctx, depth + 1)
    elif not args[0].known:
        _unresolvable(ctx, "it sources a file named by a variable")


def _alias(prog, args, env, stdin, ctx, depth):
    for w in args:
        name, eq, value = w.text.partition("=")
        if not eq or name.startswith("-"):
            continue
        if MARK in value and (_mentions_kubectl(value) or _mentions_kubectl(ctx.root_text)):
            _unresolvable(ctx, "the alias %s is built from a variable" % name)
        ctx.aliases[name] = value
        _nested(value, ctx, depth + 1)  # what the alias would run, checked as if run now


def _export(prog, args, env, stdin, ctx, depth):
    for w in args:
        if re.match(r"^KUBECONFIG\+?=", w.text):
            raise _Deny(_kubeconfig_reason(ctx))


def _unknown_bases(ctx):
    out = list(ctx.bases)
    for extra in (ctx.campaign, ctx.event_cwd):
        if extra not in out:
            out.append(extra)
    return out


def _cd(prog, args, env, stdin, ctx, depth):
    if prog == "popd":
        ctx.bases = _unknown_bases(ctx)
        return
    opts, operands = _split_opts(args)
    target = operands[0] if operands else Word(os.path.expanduser("~"))
    if not target.known or target.text == "-":
        ctx.bases = _unknown_bases(ctx)
        return
    new = []
    for base in ctx.bases:
        path = os.path.normpath(os.path.join(base, os.path.expanduser(target.text)))
        for candidate in ((path,) if os.path.isdir(path) else (path, base)):  # a failed cd stays put
            if candidate not in new:
                new.append(candidate)
    ctx.bases = new


# ------------------------------------------------------------------------------------- interpreters
_WRITE_CALL = re.compile("|".join([
    r"""\bopen\s*\([^)]*?['"][rbt]*[wax+][rwxabt+]*['"]""",              # open(p, 'w'), File.open(p, "a")
    r"""\bopen\s*\(?[^;]*?['"]\s*(\+<|\+?>{1,2}|\|)""",                   # perl open(F, ">>p")
    r"""(?<!stdout)(?<!stderr)\.write\w*\s*\(""",                        # f.write(, write_text(, writelines(
    r"""\bos\.(remove|unlink|rename|renames|replace|rmdir|removedirs|chmod|chown|lchown|truncate|ftruncate|"""
    r"""symlink|link|mkdir|makedirs|utime|system|popen|exec\w*|spawn\w*)\b""",
    r"""\b(shutil|subprocess|FileUtils|child_process)\b""",
    r"""\.(unlink|rename|touch|chmod|rmdir|symlink_to|hardlink_to|mkdir|truncate)\s*\(""",
    r"""\b(unlink|rename|chmod|chown|truncate|rmtree|sysopen|system|exec|qx)\b""",
    r"""(?<![\w.])(remove|write)\s*\(""",                                   # from os import remove; remove(p)
    r"""\bFile\.(write|open|delete|unlink|rename|chmod|truncate|symlink)\b""",
    r"""\bfs\.(write|append|unlink|rm|rename|chmod|truncate|copyFile|cp|symlink|link|mkdir|createWriteStream|"""
    r"""open)\w*""",
    r"""\.(appendFile|writeFile|unlink|rm|rename|chmod|truncate|copyFile|symlink|createWriteStream)(Sync)?\s*\(""",
    r"""\bprintf?\b[^;{}]*?>""",                                         # awk: print > "file"
]))


def _check_code(ctx, lang, code, inplace_files=()):
    if code is None:
        return
    if _mentions_kubectl(code):
        raise _Deny("guard: this %s code runs kubectl where the guard cannot check it (unparsable); run kubectl "
                    "directly, spelled out, with --context %s -n %s."
                    % (lang, ctx.setting("ATTUNE_KUBE_CONTEXT") or "CONTEXT",
                       ctx.setting("ATTUNE_NAMESPACE") or "NAMESPACE"))
    for w in inplace_files:
        _check_write(ctx, w, "%s in-place edit of" % lang)
    # A write call and a protected name in the same statement, or a write through a variable that
    # holds a protected path (p = 'ledger.jsonl'; open(p, 'a')). A script that reads the ledger and
    # writes elsewhere passes.
    tainted = {}
    for statement in re.split(r"[;\n]", code):
        mention = _mentions_protected(statement)
        assign = re.match(r"^\s*(?:my\s+|let\s+|const\s+|var\s+)?\$?([A-Za-z_]\w*)\s*=(?!=)", statement)
        if assign and mention and not re.search(r"open\s*\(|read|load", statement):
            tainted[assign.group(1)] = mention.group(0)
        if not _WRITE_CALL.search(statement):
            continue
        name = mention.group(0) if mention else None
        for variable, held in tainted.items():
            if name is None and re.search(r"(?<![\w$])\$?%s\b" % re.escape(variable), statement):
                name = held
        if name:
            raise _Deny("guard: this %s code writes and names the protected campaign file %s; records are written "
                        "only by attune verbs (add a note with `attune note TEXT`); %s."
                        % (lang, name.strip("'\""), _NOTES))


def _python(prog, args, env, stdin, ctx, depth):
    i = 0
    n = len(args)
    code = None
    script = None
    module = False
    while i < n:
        w = args[i]
        t = w.text
        if t == "-":
            code = stdin
            break
        if t.startswith("--") or not t.startswith("-") or not w.known:
            if not t.startswith("-"):
                script = w
                break
            i += 1
            continue
        flags = t[1:]
        took_next = False
        done = False
        for k, ch in enumerate(flags):
            if ch == "c":
                rest = flags[k + 1:]
                code = rest if rest else (args[i + 1].text if i + 1 < n else "")
                done = True
                break
            if ch == "m":
                module = True
                done = True
                break
            if ch in "WX":
                took_next = not flags[k + 1:]
                break
        if done:
            break
        i += 2 if took_next else 1
    else:
        if not module and code is None and script is None:
            code = stdin
    if script is not None:
        code = _read_virtual(ctx, script)
    _check_code(ctx, prog, code)


def _perl_like(prog, args, stdin, ctx, code_flags, value_flags):
    codes = []
    inplace = False
    i = 0
    n = len(args)
    while i < n:
        w = args[i]
        t = w.text
        if t == "--":
            i += 1
            break
        if not (t.startswith("-") and len(t) > 1 and w.known) or t.startswith("--"):
            if t.startswith("--"):
                i += 1
                continue
            break
        flags = t[1:]
        took_next = False
        k = 0
        while k < len(flags):
            ch = flags[k]
            if ch in code_flags:
                rest = flags[k + 1:]
                if rest:
                    codes.append(rest)
                elif i + 1 < n:
                    codes.append(args[i + 1].text)
                    took_next = True
                break
            if ch == "i":
                inplace = True
                rest = flags[k + 1:]
                if any(c in rest for c in code_flags) and i + 1 < n:  # -pie: perl reads 'e' as a suffix;
                    codes.append(args[i + 1].text)                     # be safe and take the code anyway
                    took_next = True
                break
            if ch in value_flags:
                took_next = not flags[k + 1:] and ch in "IrC"
                break
            k += 1
        i += 2 if took_next else 1
    operands = args[i:]
    if not codes:
        if operands:
            codes.append(_read_virtual(ctx, operands[0]) or "")
            operands = operands[1:]
        elif stdin is not None:
            codes.append(stdin)
    _check_code(ctx, prog, "\n".join(codes), operands if inplace else ())


def _perl(prog, args, env, stdin, ctx, depth):
    _perl_like(prog, args, stdin, ctx, "eE", "IMmxlF0CdDV")


def _ruby(prog, args, env, stdin, ctx, depth):
    _perl_like(prog, args, stdin, ctx, "e", "IrCEFTxW0")


def _node(prog, args, env, stdin, ctx, depth):
    i = 0
    n = len(args)
    code = None
    script = None
    while i < n:
        t = args[i].text
        if t in ("-e", "--eval", "-p", "--print"):
            code = args[i + 1].text if i + 1 < n else ""
            break
        match = re.match(r"^--(eval|print)=(.*)$", t, re.S)
        if match:
            code = match.group(2)
            break
        if t in ("-r", "--require", "--import", "--loader"):
            i += 2
            continue
        if t.startswith("-"):
            i += 1
            continue
        script = args[i]
        break
    if code is None:
        code = _read_virtual(ctx, script) if script is not None else stdin
    _check_code(ctx, prog, code)


def _awk(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "fvFiEl", ("file", "assign", "field-separator", "include", "exec", "load"))
    inplace = any(name in ("i", "include") and value is not None and value.text == "inplace" for name, value in opts)
    program = None
    if not any(name in ("f", "file", "E", "exec") for name, _ in opts) and operands:
        program = operands[0].text
        operands = operands[1:]
    _check_code(ctx, prog, program, operands if inplace else ())


# --------------------------------------------------------------------------------- file writers
def _writer_all(how, short_val="", long_val=()):
    def check(prog, args, env, stdin, ctx, depth):
        opts, operands = _split_opts(args, short_val, long_val)
        for w in operands:
            _check_write(ctx, w, how % prog)
    return check


def _tee(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "", ("output-error",))
    for w in operands:
        _check_write(ctx, w, "tee into")


_SED_W = re.compile(r"(?:^|[;\n{}]|/[gpiIme0-9]*|[0-9$])\s*w\s+([^;\n}]+)")


def _sed(prog, args, env, stdin, ctx, depth):
    inplace = False
    scripts = []
    operands = []
    has_script_option = False
    i = 0
    n = len(args)
    only = False
    while i < n:
        w = args[i]
        t = w.text
        if only or not t.startswith("-") or t == "-" or not w.known:
            operands.append(w)
            i += 1
            continue
        if t == "--":
            only = True
            i += 1
            continue
        if t.startswith("--"):
            name, eq, val = t[2:].partition("=")
            if name == "in-place":
                inplace = True
            elif name in ("expression", "file"):
                has_script_option = True
                if not eq:
                    val = args[i + 1].text if i + 1 < n else ""
                    i += 1
                if name == "expression":
                    scripts.append(val)
            elif name == "line-length" and not eq:
                i += 1
            i += 1
            continue
        flags = t[1:]
        took_next = False
        for k, ch in enumerate(flags):
            if ch == "i":
                inplace = True
                break
            if ch in "ef":
                has_script_option = True
                rest = flags[k + 1:]
                value = rest if rest else (args[i + 1].text if i + 1 < n else "")
                took_next = not rest
                if ch == "e":
                    scripts.append(value)
                break
            if ch == "l":
                took_next = not flags[k + 1:]
                break
        i += 2 if took_next else 1
    if not has_script_option and operands:
        scripts.append(operands.pop(0).text)
    if inplace:
        for w in operands:
            _check_write(ctx, w, "sed -i on")
    for script in scripts:
        for match in _SED_W.finditer(script):
            _check_write(ctx, Word(match.group(1).strip()), "sed's w command writing")


def _copy_like(check_sources, how, short_val="tS", long_val=("target-directory", "suffix")):
    def check(prog, args, env, stdin, ctx, depth):
        opts, operands = _split_opts(args, short_val, long_val)
        target = None
        for name, value in opts:
            if name in ("t", "target-directory"):
                target = value
        if any(name in ("d", "directory") for name, _ in opts) and prog == "install":
            for w in operands:
                _check_write(ctx, w, "install -d")
            return
        if target is not None:
            sources = operands
            dest = Word(target.text.rstrip("/") + "/", target.raw) if target.known else target
        elif prog == "ln" and len(operands) == 1:
            sources, dest = operands, Word("./")
        elif len(operands) >= 2:
            sources, dest = operands[:-1], operands[-1]
        else:
            return
        if check_sources:
            for w in sources:
                _check_write(ctx, w, how % prog)
        _check_dest(ctx, dest, sources, how % prog)
    return check


def _rsync(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "eBfTM", (
        "rsh", "exclude", "include", "exclude-from", "include-from", "files-from", "filter", "rsync-path", "temp-dir",
        "compare-dest", "copy-dest", "link-dest", "backup-dir", "suffix", "chmod", "chown", "log-file", "partial-dir",
        "password-file", "out-format", "timeout", "bwlimit", "max-size", "min-size", "port", "block-size", "usermap",
        "groupmap", "info", "debug"))
    if len(operands) < 2:
        return
    dest = operands[-1]
    sources = [s for s in operands[:-1] if not re.match(r"^[^/]*:", s.text)]
    if re.match(r"^[^/]*:", dest.text):
        return  # a remote destination
    names = [name for name, _ in opts]
    if "remove-source-files" in names:
        for w in sources:
            _check_write(ctx, w, "rsync --remove-source-files on")
    if any(name.startswith("delete") for name in names):
        _check_write(ctx, dest, "rsync --delete into")
    _check_dest(ctx, dest, sources, "rsync into", contents_on_slash=True)


def _dd(prog, args, env, stdin, ctx, depth):
    for w in args:
        if w.text.startswith("of="):
            _check_write(ctx, Word(w.text[3:]), "dd of=")


def _sort(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "okTtS", ("output", "key", "field-separator", "temporary-directory",
                                                 "buffer-size"))
    for name, value in opts:
        if name in ("o", "output"):
            _check_write(ctx, value, "sort -o writing")


def _curl(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "oXHdFuAeEKrTwxyzbcCDm", (
        "output", "request", "header", "data", "data-raw", "data-binary", "form", "user", "user-agent", "referer",
        "cert", "config", "range", "upload-file", "write-out", "proxy", "cookie", "cookie-jar", "dump-header",
        "max-time", "connect-timeout", "url", "output-dir"))
    for name, value in opts:
        if name in ("o", "output", "D", "dump-header", "c", "cookie-jar"):
            _check_write(ctx, value, "curl writing")


def _wget(prog, args, env, stdin, ctx, depth):
    opts, operands = _split_opts(args, "OoaPtTUe", ("output-document", "output-file", "append-output",
                                                   "directory-prefix", "tries", "timeout", "user-agent"))
    for name, value in opts:
        if name in ("O", "output-document", "o", "output-file", "a", "append-output"):
            _check_write(ctx, value, "wget writing")


def _find(prog, args, env, stdin, ctx, depth):
    i = 0
    n = len(args)
    while i < n and (args[i].text in ("-H", "-L", "-P") or re.match(r"^-O[0-9]*$", args[i].text)):
        i += 1
    roots = []
    while i < n and not args[i].text.startswith("-") and args[i].text not in ("(", "!", ")", ","):
        roots.append(args[i])
        i += 1
    if not roots:
        roots = [Word(".")]
    while i < n:
        t = args[i].text
        if t in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            words = []
            while j < n and args[j].text not in (";", "+"):
                words.append(args[j])
                j += 1
            for root in roots:
                run = [Word(w.text.replace("{}", root.text), w.raw, w.glob, w.brace) for w in words]
                if run:
                    _run(run, {}, None, ctx, depth + 1)
            i = j + 1
            continue
        if t == "-delete":
            for root in roots:
                _check_write(ctx, root, "find -delete under")
        elif t in ("-fprint", "-fprint0", "-fls", "-fprintf") and i + 1 < n:
            _check_write(ctx, args[i + 1], "find %s writing" % t)
            i += 1
        i += 1


# --------------------------------------------------------------------------------------- kubectl
_K_LONG_VALUE = frozenset("""
context namespace kubeconfig cluster user server token as as-group as-uid username password certificate-authority
client-certificate client-key tls-server-name request-timeout cache-dir log-file log-dir log-file-max-size v vmodule
profile profile-output filename output selector field-selector container kustomize type patch patch-file image
replicas timeout for since since-time tail sort-by template grace-period field-manager overrides env port
target-port address limits requests labels restart subresource chunk-size raw from-file from-literal from-env-file
from docker-server docker-username docker-password docker-email cert key min max cpu-percent protocol name
session-affinity external-ip load-balancer-ip generator resource-version current-replicas to-revision revision
label-columns pod-running-timeout retries api-group verbs resource prune-allowlist prune-whitelist copy-to target
image-pull-policy custom serviceaccount role clusterrole group hostport schedule clusterip tcp node-name keys
limit-bytes max-log-requests output-directory annotations containers local-port
""".split())
_K_SHORT = {"n": "namespace", "f": "filename", "o": "output", "l": "selector", "c": "container", "k": "kustomize",
            "s": "server", "v": "v", "L": "label-columns", "A": "all-namespaces", "h": "help", "R": "recursive",
            "w": "watch", "i": "stdin", "t": "tty", "q": "quiet", "p": "previous"}
_K_IDENTITY = frozenset(("server", "cluster", "user", "token", "as", "as-group", "as-uid", "username", "password",
                         "certificate-authority", "client-certificate", "client-key"))
_K_READ = frozenset(("get", "describe", "top", "explain", "api-resources", "api-versions", "version", "wait", "events",
                     "diff", "cluster-info", "kustomize", "auth"))
_K_POD = frozenset(("exec", "logs", "attach", "port-forward", "cp", "debug"))
_K_CHANGE = frozenset(("create", "apply", "delete", "patch", "edit", "label", "annotate", "scale", "replace",
                       "rollout", "set", "autoscale", "expose", "run"))
_K_NEVER = frozenset(("cordon", "uncordon", "drain", "taint", "certificate", "proxy"))
_K_HELP = frozenset(("help", "completion", "options", "plugin"))
_CLUSTER_SCOPED = frozenset("""
node nodes no namespace namespaces ns clusterrole clusterroles clusterrolebinding clusterrolebindings
persistentvolume persistentvolumes pv storageclass storageclasses sc customresourcedefinition
customresourcedefinitions crd crds priorityclass priorityclasses pc mutatingwebhookconfiguration
mutatingwebhookconfigurations validatingwebhookconfiguration validatingwebhookconfigurations apiservice apiservices
csidriver csidrivers csinode csinodes runtimeclass runtimeclasses volumeattachment volumeattachments ingressclass
ingressclasses certificatesigningrequest certificatesigningrequests csr clusterissuer clusterissuers
""".split())
_K_CP_REMOTE = re.compile(r"^(?:([a-z0-9][a-z0-9-]*)/)?([a-zA-Z0-9][a-zA-Z0-9._-]*):")
_K_HINT = {
    "delete": "To stop a run use `attune teardown RUN` rather than kubectl delete.",
    "create": "Runs are launched with `attune launch RUN`, which names their objects.",
    "apply": "Runs are launched with `attune launch RUN`, which names their objects.",
    "replace": "Runs are launched with `attune launch RUN`, which names their objects.",
    "run": "Runs are launched with `attune launch RUN`, which names their objects.",
}


class _KArgs(object):
    def __init__(self):
        self.contexts = []
        self.namespaces = []
        self.files = []
        self.selectors = []
        self.flags = set()
        self.values = {}
        self.positionals = []


def _kubectl_parse(args, ctx, verb, lenient=False):
    short_value = "nfolcksvL"
    names = dict(_K_SHORT)
    if verb == "patch":
        short_value += "p"
        names["p"] = "patch"
    elif verb == "logs":
        short_value = short_value.replace("f", "")
        names["f"] = "follow"
    st = _KArgs()
    i = 0
    n = len(args)
    while i < n:
        w = args[i]
        t = w.text
        if t.startswith(MARK):
            raise _Deny("guard: the kubectl argument %s comes from a variable, a substitution or xargs, so the guard "
                        "cannot see it (unparsable). Write kubectl's arguments out, with --context %s -n %s."
                        % (_show(w.raw), ctx.setting("ATTUNE_KUBE_CONTEXT"),
                           ctx.setting("ATTUNE_NAMESPACE")))
        if t == "--":
            break
        if t.startswith("--"):
            name, eq, val = t[2:].partition("=")
            if eq:
                value = Word(val)
            elif name in _K_LONG_VALUE:
                if i + 1 >= n:
                    if not lenient:
                        raise _Unparsable("kubectl --%s has no value" % name)
                    value = None
                else:
                    value = args[i + 1]
                    i += 1
            else:
                value = None
            _k_record(st, name, value, ctx)
            i += 1
            continue
        if t.startswith("-") and len(t) > 1:
            k = 1
            while k < len(t):
                ch = t[k]
                if ch in short_value:
                    rest = t[k + 1:]
                    if rest.startswith("="):
                        rest = rest[1:]
                    if rest:
                        value = Word(rest)
                    elif i + 1 < n:
                        value = args[i + 1]
                        i += 1
                    elif lenient:
                        value = None
                    else:
                        raise _Unparsable("kubectl -%s has no value" % ch)
                    _k_record(st, names.get(ch, ch), value, ctx)
                    break
                _k_record(st, names.get(ch, ch), None, ctx)
                k += 1
            i += 1
            continue
        st.positionals.append(w)
        i += 1
    return st


def _k_record(st, name, value, ctx):
    if name == "context":
        st.contexts.append(value)
    elif name == "namespace":
        st.namespaces.append(value)
    elif name == "kubeconfig":
        raise _Deny(_kubeconfig_reason(ctx))
    elif name == "all-namespaces":
        if value is None or value.text.lower() not in ("false", "0"):
            raise _Deny("guard: the campaign sees only its own namespace: drop -A/--all-namespaces and pass -n %s "
                        "(with --context %s)." % (ctx.setting("ATTUNE_NAMESPACE"), ctx.setting("ATTUNE_KUBE_CONTEXT")))
    elif name in _K_IDENTITY:
        raise _Deny("guard: kubectl --%s is not allowed: the campaign's context alone selects the cluster and the "
                    "user. Drop it and pass --context %s -n %s." % (name, ctx.setting("ATTUNE_KUBE_CONTEXT"),
                                                                   ctx.setting("ATTUNE_NAMESPACE")))
    elif name == "filename":
        st.files.append(value)
    elif name in ("selector", "field-selector"):
        st.selectors.append(value)
    else:
        st.flags.add(name)
        st.values.setdefault(name, []).append(value)


def _kubectl(prog, args, env, stdin, ctx, depth):
    if "KUBECONFIG" in env:
        raise _Deny(_kubeconfig_reason(ctx))
    first = _kubectl_parse(args, ctx, None, lenient=True)  # finds the verb: -f and -p depend on it
    verb = first.positionals[0].text if first.positionals else None
    st = _kubectl_parse(args, ctx, verb)
    if "help" in st.flags or verb is None or verb in _K_HELP:
        return  # help text only: kubectl talks to no cluster
    context = ctx.setting("ATTUNE_KUBE_CONTEXT")
    namespace = ctx.setting("ATTUNE_NAMESPACE")
    if verb == "config":
        raise _Deny("guard: kubectl config is not allowed: the campaign's context is fixed and the kubeconfig is "
                    "not changed. Pass --context %s -n %s on each kubectl command instead."
                    % (context or "CONTEXT", namespace or "NAMESPACE"))
    if verb in _K_NEVER:
        raise _Deny("guard: kubectl %s is never allowed to the agent (it changes nodes or opens the whole API); "
                    "ask the cluster's operators." % verb)
    if verb not in _K_READ and verb not in _K_POD and verb not in _K_CHANGE:
        raise _Deny("guard: kubectl %s is not a kubectl command the guard knows, so it cannot check it "
                    "(unparsable). Use get/describe/logs/exec or the attune verbs." % verb)
    if not context or not namespace or not ctx.setting("ATTUNE_RUN_PREFIX"):
        if ctx.setting("ATTUNE_BACKEND") == "local":
            raise _Deny("guard: this campaign runs on the local backend (ATTUNE_BACKEND=local) and uses no "
                        "cluster; kubectl is not needed. Use the attune verbs.")
        raise _Deny("guard: the campaign's frozen settings (.attune/settings.env) lack ATTUNE_KUBE_CONTEXT, "
                    "ATTUNE_NAMESPACE or ATTUNE_RUN_PREFIX, so the guard cannot check kubectl; start the campaign "
                    "with `attune init` first.")
    if not st.contexts:
        raise _Deny("guard: kubectl must name the campaign's cluster: add --context %s -n %s." % (context, namespace))
    for value in st.contexts:
        if value is None or value.text != context:
            raise _Deny("guard: --context %s is not this campaign's context; use --context %s -n %s."
                        % (_show(value.text) if value else "", context, namespace))
    if not st.namespaces:
        raise _Deny("guard: kubectl must name the campaign's namespace: add -n %s (with --context %s)."
                    % (namespace, context))
    for value in st.namespaces:
        if value is None or value.text != namespace:
            raise _Deny("guard: namespace %s is not this campaign's; the campaign works only in -n %s "
                        "(with --context %s)." % (_show(value.text) if value else "", namespace, context))
    if verb in _K_READ:
        if verb == "auth":
            sub = st.positionals[1].text if len(st.positionals) > 1 else ""
            if sub not in ("can-i", "whoami"):
                raise _Deny("guard: kubectl auth %s changes access rules and is never allowed to the agent." % sub)
        for value in st.values.get("output-directory", []):
            _check_write(ctx, value, "kubectl cluster-info dump into")
        return
    if verb in _K_POD:
        _k_pod(verb, st, ctx)
        return
    _k_change(verb, st, stdin, ctx)


def _k_pod_ok(ctx, text, allow_log_pod=True):
    prefix = ctx.setting("ATTUNE_RUN_PREFIX")
    log_pod = ctx.setting("AUTOTUNE_LOG_POD")
    kind, slash, name = text.partition("/")
    if not slash:
        kind, name = "pod", text
    if not name:
        return False
    if name.startswith(prefix):
        return True
    return bool(allow_log_pod and log_pod and kind.lower() in ("pod", "pods", "po") and name == log_pod)


def _k_pod_reason(ctx, verb, what):
    return ("guard: kubectl %s only into this campaign's pods (names starting with %s) or the log pod %s; %s is "
            "neither. Follow a run with `attune poll RUN` or read its log through the log pod."
            % (verb, ctx.setting("ATTUNE_RUN_PREFIX"), ctx.setting("AUTOTUNE_LOG_POD") or "(none set)", what))


def _k_pod(verb, st, ctx):
    namespace = ctx.setting("ATTUNE_NAMESPACE")
    prefix = ctx.setting("ATTUNE_RUN_PREFIX")
    pos = st.positionals[1:]
    if verb == "cp":
        if len(pos) < 2:
            raise _Deny("guard: kubectl cp needs SRC and DST, one of them POD:PATH in one of this campaign's pods.")
        remotes = 0
        for word, is_dest in ((pos[0], False), (pos[1], True)):
            match = _K_CP_REMOTE.match(word.text)
            if match:
                remotes += 1
                if match.group(1) and match.group(1) != namespace:
                    raise _Deny("guard: kubectl cp into namespace %s: the campaign works only in %s."
                                % (match.group(1), namespace))
                if not _k_pod_ok(ctx, match.group(2)):
                    raise _Deny(_k_pod_reason(ctx, "cp", "pod %s" % match.group(2)))
            elif is_dest:
                _check_write(ctx, word, "kubectl cp into")
        if not remotes:
            raise _Deny("guard: kubectl cp needs one side POD:PATH in one of this campaign's pods.")
        return
    if not pos:
        if verb == "logs" and st.selectors and all(v is not None and prefix in v.text for v in st.selectors):
            return
        raise _Deny("guard: kubectl %s needs a pod named: one of this campaign's pods (starting with %s) or the "
                    "log pod %s." % (verb, prefix, ctx.setting("AUTOTUNE_LOG_POD") or "(none set)"))
    target = pos[0].text
    if verb == "debug":
        kind = target.partition("/")[0].lower() if "/" in target else "pod"
        if kind in _CLUSTER_SCOPED or not _k_pod_ok(ctx, target, allow_log_pod=False):
            raise _Deny(_k_pod_reason(ctx, "debug", target) + " (debug may not target the log pod or nodes)")
        for value in st.values.get("copy-to", []):
            if value is None or not value.text.startswith(prefix):
                raise _Deny("guard: kubectl debug --copy-to must name a pod starting with %s." % prefix)
        return
    if not _k_pod_ok(ctx, target):
        raise _Deny(_k_pod_reason(ctx, verb, target))


def _cluster_scoped(kind):
    return any(part.strip().lower().split(".")[0] in _CLUSTER_SCOPED for part in kind.split(","))


def _k_name(ctx, verb, kind, name):
    prefix = ctx.setting("ATTUNE_RUN_PREFIX")
    if _cluster_scoped(kind):
        raise _Deny("guard: kubectl %s of %s: cluster-scoped objects are outside the campaign's namespace and are "
                    "never changed by the agent." % (verb, kind))
    if not name:
        raise _Deny("guard: kubectl %s must name the objects it changes (names starting with %s). %s"
                    % (verb, prefix, _K_HINT.get(verb, "")))
    if not name.startswith(prefix):
        raise _Deny("guard: kubectl %s may change only this campaign's objects, whose names start with %s; "
                    "%s %s is not one. %s" % (verb, prefix, kind, _show(name),
                                              _K_HINT.get(verb, "Other objects on the cluster belong to others.")))


def _k_refs(pos, verb):
    toks = [w for w in pos if "=" not in w.text
            and not (verb in ("label", "annotate", "set") and w.text.endswith("-"))]
    if not toks:
        return []
    if "/" in toks[0].text:
        return [tuple(w.text.split("/", 1)) for w in toks if "/" in w.text]
    kind = toks[0].text
    if len(toks) == 1:
        return [(kind, "")]
    return [(kind, w.text) for w in toks[1:]]


def _k_change(verb, st, stdin, ctx):
    pos = st.positionals[1:]
    if verb == "rollout":
        sub = pos[0].text if pos else ""
        if sub in ("status", "history"):
            return
        if sub not in ("restart", "undo", "pause", "resume"):
            raise _Deny("guard: kubectl rollout %s is not a rollout command the guard knows (unparsable)." % sub)
        pos = pos[1:]
    elif verb == "set":
        sub = pos[0].text if pos else ""
        if sub not in ("image", "env", "resources", "selector", "serviceaccount", "sa", "subject"):
            raise _Deny("guard: kubectl set %s is not a set command the guard knows (unparsable)." % sub)
        pos = pos[1:]
    elif verb == "apply" and pos and pos[0].text == "view-last-applied":
        return
    elif verb == "apply" and pos and pos[0].text in ("edit-last-applied", "set-last-applied"):
        pos = pos[1:]
    prefix = ctx.setting("ATTUNE_RUN_PREFIX")
    if "all" in st.flags:
        raise _Deny("guard: kubectl %s --all would touch objects that are not the campaign's; name the objects "
                    "(starting with %s). %s" % (verb, prefix, _K_HINT.get(verb, "")))
    if st.selectors and verb not in ("run", "expose", "create", "apply"):
        raise _Deny("guard: kubectl %s with a selector may touch objects that are not the campaign's; name the "
                    "objects (starting with %s). %s" % (verb, prefix, _K_HINT.get(verb, "")))
    if "prune" in st.flags:
        raise _Deny("guard: kubectl apply --prune deletes objects the manifest does not name; drop --prune.")
    if "kustomize" in st.flags:
        raise _Deny("guard: kubectl %s -k: the guard cannot read kustomizations; render it (kubectl kustomize DIR "
                    "> scratch/out.yaml) and pass -f scratch/out.yaml." % verb)
    if "raw" in st.flags:
        raise _Deny("guard: kubectl %s --raw bypasses the object checks; name the objects instead." % verb)
    checked = False
    if st.files:
        for obj in _manifest_objects(st, stdin, ctx):
            _k_check_object(ctx, verb, obj)
        checked = True
    if verb == "run":
        _k_name(ctx, verb, "pod", pos[0].text if pos else "")
        checked = True
    elif verb == "create" and pos:
        kind = pos[0].text.lower()
        index = 2 if kind in ("secret", "service", "svc") else 1
        _k_name(ctx, verb, kind, pos[index].text if len(pos) > index else "")
        checked = True
    elif pos:
        for kind, name in _k_refs(pos, verb):
            _k_name(ctx, verb, kind, name)
            checked = True
    for value in st.values.get("name", []):
        _k_name(ctx, verb, "object", value.text if value is not None else "")
    if not checked:
        raise _Deny("guard: kubectl %s must name the objects it changes (names starting with %s) or pass -f "
                    "MANIFEST. %s" % (verb, prefix, _K_HINT.get(verb, "")))


def _k_check_object(ctx, verb, obj):
    namespace = ctx.setting("ATTUNE_NAMESPACE")
    kind = obj["kind"] or "object"
    if obj["namespace"] is not None and obj["namespace"] != namespace:
        raise _Deny("guard: the manifest (%s) puts %s %s in namespace %s; the campaign works only in %s. Drop "
                    "metadata.namespace or set it to %s." % (obj["where"], kind, _show(obj["name"] or "?"),
                                                             _show(obj["namespace"]), namespace, namespace))
    _k_name(ctx, verb, kind, obj["name"] or obj["generateName"])


def _manifest_objects(st, stdin, ctx):
    objects = []
    recursive = "recursive" in st.flags
    for word in st.files:
        if word is None:
            raise _Deny("guard: kubectl -f without a file.")
        text = word.text
        if text == "-":
            if stdin is None:
                raise _Deny("guard: kubectl -f - reads a manifest the guard cannot see; pass it with -f FILE or "
                            "as a here-document so that its names and namespaces can be checked.")
            texts = [("stdin", stdin)]
        elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
            raise _Deny("guard: kubectl -f %s: download the manifest first and pass -f FILE, so that the guard can "
                        "check its names and namespaces." % text)
        elif not word.known:
            raise _Deny("guard: kubectl -f %s: the guard cannot tell which manifest this is (unparsable); write "
                        "the path out." % _show(text))
        else:
            texts = _manifest_texts(ctx, text, recursive)
        for where, body in texts:
            try:
                objects.extend(_parse_manifest(body, where))
            except _ManifestError as exc:
                raise _Deny("guard: cannot parse the manifest %s (%s), so its names and namespaces cannot be "
                            "checked; write it as plain YAML or JSON." % (where, exc))
    if not objects:
        raise _Deny("guard: found no objects in the manifest(s), so the guard cannot check what kubectl changes.")
    return objects


def _manifest_texts(ctx, text, recursive):
    path = _resolve(ctx, text)
    if path in ctx.virtual:
        if ctx.virtual[path] is None:
            raise _Deny("guard: the manifest %s is written earlier in this command with text the guard cannot "
                        "see; write it in one call and apply it in the next." % text)
        return [(text, ctx.virtual[path])]
    if os.path.isdir(path):
        out = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".yaml", ".yml", ".json")):
                    body = _read_real(os.path.join(root, name))
                    if body is not None:
                        out.append((os.path.join(root, name), body))
            if not recursive:
                break
        return out
    body = _read_real(path)
    if body is None:
        raise _Deny("guard: cannot read the manifest %s, so the names and namespaces it holds cannot be checked; "
                    "check the path (relative paths resolve against the working directory)." % text)
    return [(text, body)]


# ---------------------------------------------------------------------------- a small YAML reader
class _ManifestError(Exception):
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
    parts = [p.strip() for p in _split_top(text[1:-1], ",") if p.strip()]
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
                raise _ManifestError("unexpected indentation at %r" % text[:60])
            pair = _split_key(text)
            if pair is None:
                raise _ManifestError("expected key: value at %r" % text[:60])
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


def _parse_manifest(text, where):
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
            raise _ManifestError("could not read past %r" % lines[parser.pos][1][:60])
        objects.extend(_objects_of(node, where))
    return objects


# ----------------------------------------------------------------------------------- dispatch
_PROGRAMS = {
    "kubectl": _kubectl, "kubectl.exe": _kubectl,
    "env": _env, "timeout": _timeout, "nohup": _plain_wrapper, "builtin": _plain_wrapper, "setsid": _exec,
    "nice": _nice, "sudo": _sudo, "doas": _doas, "time": _time, "command": _command, "exec": _exec,
    "stdbuf": _stdbuf, "ionice": _ionice, "xargs": _xargs, "watch": _watch,
    "bash": _shell, "sh": _shell, "dash": _shell, "zsh": _shell, "ksh": _shell, "mksh": _shell, "ash": _shell,
    "yash": _shell, "fish": _shell,
    "eval": _eval, "source": _source, ".": _source, "alias": _alias,
    "export": _export, "declare": _export, "typeset": _export, "local": _export, "readonly": _export,
    "cd": _cd, "pushd": _cd, "popd": _cd,
    "perl": _perl, "ruby": _ruby, "node": _node, "nodejs": _node,
    "awk": _awk, "gawk": _awk, "mawk": _awk, "nawk": _awk,
    "tee": _tee, "sed": _sed,
    "mv": _copy_like(True, "%s of"), "cp": _copy_like(False, "%s into"), "ln": _copy_like(False, "%s creating"),
    "install": _copy_like(False, "%s into", "tSgmo", ("target-directory", "suffix", "group", "mode", "owner")),
    "rsync": _rsync,
    "rm": _writer_all("%s of"), "unlink": _writer_all("%s of"), "rmdir": _writer_all("%s of"),
    "shred": _writer_all("%s of", "nsu", ("iterations", "size")),
    "mkdir": _writer_all("%s in", "m", ("mode", "context")),
    "chmod": _writer_all("%s of", "", ("reference",)), "chown": _writer_all("%s of", "", ("reference", "from")),
    "chgrp": _writer_all("%s of", "", ("reference",)),
    "touch": _writer_all("%s of", "dtr", ("date", "reference", "time")),
    "truncate": _writer_all("%s of", "sr", ("size", "reference")),
    "dd": _dd, "sort": _sort, "curl": _curl, "wget": _wget, "find": _find,
}


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
                        "denied until the harness is installed whole." % _IMPORT_ERROR)
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
        if value in _FALSE:
            return "deny", ("guard: web access is off for this campaign (AUTOTUNE_ALLOW_WEB=%s); work from the "
                            "skill's references (skill/references/) and the campaign's own files." % value)
        return _allow(tool)
    if tool in _EDIT_TOOLS:
        path = tool_input.get(_EDIT_TOOLS[tool]) or tool_input.get("file_path")
        if not isinstance(path, str) or not path:
            return "deny", ("guard: %s without a %s; the guard cannot tell which file it changes."
                            % (tool, _EDIT_TOOLS[tool]))
        rel = campaign_files.relative(campaign, path, cwd)
        if rel is not None and campaign_files.is_protected(rel):
            return "deny", _protected_reason(rel, "%s of" % tool, path)
        return _allow("%s of %s" % (tool, path))
    command = tool_input.get("command")
    if not isinstance(command, str):
        return "deny", "guard: Bash without a command string; the guard cannot check it."
    if len(command) > MAX_COMMAND:
        return "deny", ("guard: the command is longer than %d characters, too long to check; write long inputs "
                        "to a file in scratch/ first." % MAX_COMMAND)
    ctx = _Ctx(campaign, settings, cwd, command)
    _analyze_text(command, ctx, 0)
    return _allow("Bash command")


def decide(event, campaign_dir, settings):
    """``(decision, reason)`` for one PreToolUse event: decision is "allow" or "deny".

    ``campaign_dir``: the campaign directory (None when unknown); ``settings``: its frozen settings
    as ``{NAME: text}`` (``campaign_files.read_settings``)."""
    try:
        return _decide(event, campaign_dir, settings)
    except _Deny as deny:
        return "deny", deny.reason
    except _Unparsable as exc:
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
