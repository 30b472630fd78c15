"""The table from program name to the function that checks a call of it, registered into
``context.PROGRAMS`` when the package loads; programs not listed are allowed as they are (their
redirections are still checked).
"""

import re

from .commands import (
    _alias, _cd, _command, _doas, _env, _eval, _exec, _export, _ionice, _nice, _plain_wrapper, _shell,
    _source, _stdbuf, _sudo, _time, _timeout, _watch, _xargs)
from .context import PROGRAM_PATTERNS, PROGRAMS
from .interpreters import _awk, _node, _perl, _python, _ruby
from .writers import _copy_like, _curl, _dd, _find, _rsync, _sed, _sort, _tee, _wget, _writer_all
from .kubectl import _kubectl as _kubectl_rules
from .verbs import _attune, kubectl_in_sandbox

_kubectl = kubectl_in_sandbox(_kubectl_rules)


# ----------------------------------------------------------------------------------- dispatch
_PROGRAMS = {
    "kubectl": _kubectl, "kubectl.exe": _kubectl, "attune": _attune,
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

PROGRAMS.update(_PROGRAMS)
PROGRAM_PATTERNS.append((re.compile(r"^(python|pypy)[0-9.]*$"), _python))
