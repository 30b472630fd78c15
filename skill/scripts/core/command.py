"""A training command line (a RayJob entrypoint) as program, ordered arguments and environment,
edited in place: every byte not changed is kept (quoting, ``--flag=value``, repeated and unknown
flags, boolean flags, line continuations).

The command is split into shell words with their exact spans. The training program is the first
word ending in ``.py`` (``pretrain_gpt.py``, slime's ``train.py``); its arguments run to the end
or to the first ``&&``, ``||``, ``;`` or ``|``. ``NAME=value`` words before the program are its
environment. An argument ``--flag`` takes the next word as its value unless that word starts with
``--`` (so ``--lr -1`` works); ``--flag=value`` is one word.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Optional

from .errors import InputError

_OPERATORS = ("&&", "||", ";", "|")
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclasses.dataclass(frozen=True)
class Word:
    value: str  # after quote removal
    start: int
    end: int  # span of the raw text in the command


def split_words(text: str) -> list:
    """Shell words with spans. Backslash-newline is a separator; operators are words of their own."""
    words = []
    i, size = 0, len(text)
    while i < size:
        char = text[i]
        if char in " \t\n" or (char == "\\" and text[i + 1:i + 2] == "\n"):
            i += 2 if char == "\\" else 1
            continue
        if text.startswith(("&&", "||"), i):
            words.append(Word(text[i:i + 2], i, i + 2))
            i += 2
            continue
        if char in ";|":
            words.append(Word(char, i, i + 1))
            i += 1
            continue
        start, value = i, []
        while i < size and text[i] not in " \t\n;|" and not text.startswith("&&", i):
            char = text[i]
            if char == "\\" and text[i + 1:i + 2] == "\n":
                break
            if char == "\\" and i + 1 < size:
                value.append(text[i + 1])
                i += 2
            elif char in "'\"":
                close = text.find(char, i + 1)
                while char == '"' and close > 0 and text[close - 1] == "\\":
                    close = text.find(char, close + 1)
                if close < 0:
                    raise InputError("the entrypoint has an unclosed %s quote at character %d" % (char, i))
                inner = text[i + 1:close]
                value.append(inner.replace('\\"', '"') if char == '"' else inner)
                i = close + 1
            else:
                value.append(char)
                i += 1
        words.append(Word("".join(value), start, i))
    return words


def quote(value: str) -> str:
    return shlex.quote(value) if value != "" else "''"


@dataclasses.dataclass
class Command:
    text: str

    def __post_init__(self):
        self.words = split_words(self.text)
        self.program_index = next((n for n, word in enumerate(self.words) if word.value.endswith(".py")), None)
        if self.program_index is None:
            raise InputError("the entrypoint runs no Python training program (no word ending in .py): %r"
                             % self.text[:200])
        end = len(self.words)
        for n in range(self.program_index + 1, len(self.words)):
            if self.words[n].value in _OPERATORS:
                end = n
                break
        self.args_end = end

    @property
    def program(self) -> str:
        return self.words[self.program_index].value

    def prefix_env(self) -> dict:
        """``NAME=value`` words directly before the program (and before any launcher words)."""
        out = {}
        for word in self.words[:self.program_index]:
            if word.value in _OPERATORS:
                out = {}
            elif _ENV_WORD.match(word.value):
                name, _, value = word.value.partition("=")
                out[name] = value
        return out

    def occurrences(self) -> list:
        """``[(flag, value or True, first word index, last word index)]`` in order."""
        out = []
        n = self.program_index + 1
        while n < self.args_end:
            word = self.words[n].value
            if word.startswith("--") and len(word) > 2:
                if "=" in word:
                    flag, _, value = word.partition("=")
                    out.append((flag, value, n, n))
                elif n + 1 < self.args_end and not self.words[n + 1].value.startswith("--"):
                    out.append((word, self.words[n + 1].value, n, n + 1))
                    n += 1
                else:
                    out.append((word, True, n, n))
            n += 1
        return out

    def args(self) -> dict:
        """The effective arguments, in first-seen order; a repeated flag's last value wins (argparse)."""
        out = {}
        for flag, value, _first, _last in self.occurrences():
            out[flag] = value
        return out

    def _separator(self) -> str:
        """How arguments are separated: the last line continuation between two of them
        (e.g. ``" \\\\\\n      "``), else one space. A new argument is appended alike."""
        occ = self.occurrences()
        for before, after in reversed(list(zip(occ, occ[1:]))):
            gap = self.text[self.words[before[3]].end:self.words[after[2]].start]
            if gap.strip() == "\\":
                return gap
        return " "

    def set(self, flag: str, value) -> "Command":
        """Set ``flag`` to ``value`` (``True`` for a flag without a value) on its last occurrence,
        or append it after the last argument."""
        occ = [item for item in self.occurrences() if item[0] == flag]
        if occ:
            _flag, old, first, last = occ[-1]
            if value is True:
                if old is True:
                    return self
                return self._replace(self.words[first].start, self.words[last].end, flag)
            if first == last and old is not True:  # --flag=value
                return self._replace(self.words[first].start, self.words[first].end, "%s=%s" % (flag, quote(value)))
            if old is True:
                return self._replace(self.words[first].end, self.words[first].end, " " + quote(value))
            return self._replace(self.words[last].start, self.words[last].end, quote(value))
        anchor = self.words[self.args_end - 1].end
        addition = flag if value is True else "%s %s" % (flag, quote(value))
        return self._replace(anchor, anchor, self._separator() + addition)

    def unset(self, flag: str) -> "Command":
        """Remove every occurrence of ``flag`` (and its value), with the space before it."""
        text = self.text
        for _flag, _value, first, last in reversed([item for item in self.occurrences() if item[0] == flag]):
            start = self.words[first - 1].end  # the previous word always exists: the program
            text = text[:start] + text[self.words[last].end:]
        return Command(text)

    def wrap(self, words: list) -> str:
        """The command text with ``words`` put before the training command: after the last operator
        before the program and any ``NAME=value`` words there (so those still reach it), e.g.
        ``cd /x && A=1 torchrun t.py ...`` becomes ``cd /x && A=1 <words> torchrun t.py ...``."""
        first = self.program_index
        while first > 0 and self.words[first - 1].value not in _OPERATORS \
                and not _ENV_WORD.match(self.words[first - 1].value):
            first -= 1
        at = self.words[first].start
        return self.text[:at] + " ".join(quote(word) for word in words) + " " + self.text[at:]

    def _replace(self, start: int, end: int, new: str) -> "Command":
        return Command(self.text[:start] + new + self.text[end:])
