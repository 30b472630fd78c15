"""The guard's shell lexer and parser: it reads a command line the way bash would (quotes,
escapes, ``$'...'``, ``$(...)``, backticks, process substitution, here-documents) into words
(``Word``: the text where it is known, ``MARK`` where it is not) and redirections (``Redir``), and
``parse_script`` splits the tokens into simple commands (``_Command``) with subshell marks, remembering
which command pipes into which.
"""

import re

from .context import MARK, Unparsable


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
                raise Unparsable("unbalanced quote in a here-document delimiter")
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
                raise Unparsable("unbalanced single quote")
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
    raise Unparsable("unbalanced %s ... %s" % (opening, closing))


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
    raise Unparsable("unbalanced double quote")


def _skip_backtick(s, j):
    n = len(s)
    while j < n:
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == "`":
            return j
        j += 1
    raise Unparsable("unbalanced backtick")


_ANSI = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b", "E": "\x1b",
         "\\": "\\", "'": "'", '"': '"', "?": "?"}


class Lexer(object):
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
            raise Unparsable("the redirection %s has no target" % op)
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
        inner = Lexer(text)
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
                    raise Unparsable("unbalanced single quote")
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
        raise Unparsable("unbalanced double quote")

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
        raise Unparsable("unbalanced $'...' quote")

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


def parse_script(tokens):
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
