"""The PreToolUse guard's checks, split by concern; ``hooks/pre_tool_use.py`` is the script that runs them.

Standard library only; runs on Python 3.7. Modules, each importing only those before it and only their
public names (the program registry in ``context``, which each module fills with its own checkers, lets
``commands`` dispatch without importing a later module): context (shared limits, exceptions, the
per-command context, the registry), lexer (shell lexer and parser), paths (protected-path checks),
commands (command analysis and wrappers), interpreters, writers, manifest (a small YAML reader), kubectl,
verbs (the one command that leaves the sandbox) and dispatch (loads every checker).
"""

from . import dispatch  # noqa: E402,F401 - registers every program's checker before any check runs
