"""Every program's checker, registered into ``context.PROGRAMS`` by the module that defines it as it loads
(``context.checker``): loading this module loads them all, in the package's order. Programs with no checker are
allowed as they are (their redirections are still checked).
"""

from . import commands, interpreters, kubectl, verbs, writers  # noqa: F401 - each registers its checkers
