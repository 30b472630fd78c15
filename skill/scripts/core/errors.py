"""One error taxonomy with the documented exit codes.

Exit codes (stable, documented in README.md and pinned by a test):

* 0: ok
* 1: a check failed (a gate, a budget check, a refused shipment, a refused stop)
* 2: usage or bad input (settings, arguments, malformed files)
* 3: integrity (a broken hash chain, a changed protected file)

Every error a user can cause is a ``ValueError`` subclass whose message states the value, the
rule and the fix; the CLI prints it as one line on stderr and exits with the class's code.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_INTEGRITY = 3

EXIT_CODES = {
    "ok": EXIT_OK,
    "check_failed": EXIT_CHECK_FAILED,
    "usage": EXIT_USAGE,
    "integrity": EXIT_INTEGRITY,
}


class AttuneError(ValueError):
    """Base class for every user-facing error."""

    exit_code = EXIT_USAGE

    def lines(self) -> list:
        """The message as the list of one-line problems the CLI prints."""
        return [line for line in str(self).splitlines() if line.strip()]


class InputError(AttuneError):
    """Bad arguments or a malformed input file."""


class SettingsError(AttuneError):
    """One or more settings are invalid; each problem is one line."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class CheckFailed(AttuneError):
    """A check ran and said no (budget exhausted, shipment refused, ...)."""

    exit_code = EXIT_CHECK_FAILED


class IntegrityError(AttuneError):
    """A record that must never change has changed, or cannot be trusted."""

    exit_code = EXIT_INTEGRITY
