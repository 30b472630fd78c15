"""The PreToolUse guard's checks, split by concern; ``hooks/pre_tool_use.py`` is the script that runs them.

Standard library only; runs on Python 3.7. Modules, each importing only those before it (``dispatch``
fills the program registry in ``context``, so ``commands`` needs no later module): context
(shared limits, exceptions, the per-command context), lexer (shell lexer and parser), paths
(protected-path checks), commands (command analysis and wrappers), interpreters, writers, manifest (a
small YAML reader), kubectl, verbs (the one command that leaves the sandbox) and dispatch (program name
to checker).
"""

from . import dispatch  # noqa: E402,F401 - registers every program's checker before any check runs
