"""The PreToolUse guard's checks, split by concern; ``hooks/pre_tool_use.py`` is the script that runs them.

Standard library only; runs on Python 3.7. Modules, each importing only those before it: context
(shared limits, exceptions, the per-command context), lexer (shell lexer and parser), paths
(protected-path checks), commands (command analysis and wrappers), interpreters, writers, kubectl,
verbs (the one command that leaves the sandbox), manifest (a small YAML reader) and dispatch (program
name to checker).
"""
