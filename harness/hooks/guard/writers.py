"""Programs that write files: tee, sed (``-i`` and its ``w`` commands), mv, cp, ln, install,
rsync, rm, mkdir, chmod and friends, touch, truncate, dd, sort ``-o``, curl and wget outputs, and
find (``-delete``, ``-exec``, ``-fprint``); each destination is checked against the protected
campaign paths.
"""

import re

from .context import checker

from .lexer import Word
from .paths import check_dest, check_write
from .commands import run_words, split_opts


# --------------------------------------------------------------------------------- file writers
def _writer_all(how, short_val="", long_val=()):
    def check(prog, args, env, stdin, ctx, depth):
        opts, operands = split_opts(args, short_val, long_val)
        for w in operands:
            check_write(ctx, w, how % prog)
    return check


@checker("tee")
def _tee(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "", ("output-error",))
    for w in operands:
        check_write(ctx, w, "tee into")


_SED_W = re.compile(r"(?:^|[;\n{}]|/[gpiIme0-9]*|[0-9$])\s*w\s+([^;\n}]+)")


@checker("sed")
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
            check_write(ctx, w, "sed -i on")
    for script in scripts:
        for match in _SED_W.finditer(script):
            check_write(ctx, Word(match.group(1).strip()), "sed's w command writing")


def _copy_like(check_sources, how, short_val="tS", long_val=("target-directory", "suffix")):
    def check(prog, args, env, stdin, ctx, depth):
        opts, operands = split_opts(args, short_val, long_val)
        target = None
        for name, value in opts:
            if name in ("t", "target-directory"):
                target = value
        if any(name in ("d", "directory") for name, _ in opts) and prog == "install":
            for w in operands:
                check_write(ctx, w, "install -d")
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
                check_write(ctx, w, how % prog)
        check_dest(ctx, dest, sources, how % prog)
    return check


@checker("rsync")
def _rsync(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "eBfTM", (
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
            check_write(ctx, w, "rsync --remove-source-files on")
    if any(name.startswith("delete") for name in names):
        check_write(ctx, dest, "rsync --delete into")
    check_dest(ctx, dest, sources, "rsync into", contents_on_slash=True)


@checker("dd")
def _dd(prog, args, env, stdin, ctx, depth):
    for w in args:
        if w.text.startswith("of="):
            check_write(ctx, Word(w.text[3:]), "dd of=")


@checker("sort")
def _sort(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "okTtS", ("output", "key", "field-separator", "temporary-directory",
                                                 "buffer-size"))
    for name, value in opts:
        if name in ("o", "output"):
            check_write(ctx, value, "sort -o writing")


def _output_options(short, long, outputs, what):
    """The checker of a program that writes only where some of its options say (curl -o, wget -O)."""
    def check(prog, args, env, stdin, ctx, depth):
        opts, _operands = split_opts(args, short, long)
        for name, value in opts:
            if name in outputs:
                check_write(ctx, value, what)
    return check


checker("curl")(_output_options("oXHdFuAeEKrTwxyzbcCDm", (
    "output", "request", "header", "data", "data-raw", "data-binary", "form", "user", "user-agent", "referer", "cert",
    "config", "range", "upload-file", "write-out", "proxy", "cookie", "cookie-jar", "dump-header", "max-time",
    "connect-timeout", "url", "output-dir"), ("o", "output", "D", "dump-header", "c", "cookie-jar"), "curl writing"))
checker("wget")(_output_options("OoaPtTUe", ("output-document", "output-file", "append-output", "directory-prefix",
                                             "tries", "timeout", "user-agent"),
                                ("O", "output-document", "o", "output-file", "a", "append-output"), "wget writing"))


@checker("find")
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
                    run_words(run, {}, None, ctx, depth + 1)
            i = j + 1
            continue
        if t == "-delete":
            for root in roots:
                check_write(ctx, root, "find -delete under")
        elif t in ("-fprint", "-fprint0", "-fls", "-fprintf") and i + 1 < n:
            check_write(ctx, args[i + 1], "find %s writing" % t)
            i += 1
        i += 1


# the checkers made by the factories above
checker("mv")(_copy_like(True, "%s of"))
checker("cp")(_copy_like(False, "%s into"))
checker("ln")(_copy_like(False, "%s creating"))
checker("install")(_copy_like(False, "%s into", "tSgmo", ("target-directory", "suffix", "group", "mode", "owner")))
checker("rm", "unlink", "rmdir")(_writer_all("%s of"))
checker("shred")(_writer_all("%s of", "nsu", ("iterations", "size")))
checker("mkdir")(_writer_all("%s in", "m", ("mode", "context")))
checker("chmod", "chgrp")(_writer_all("%s of", "", ("reference",)))
checker("chown")(_writer_all("%s of", "", ("reference", "from")))
checker("touch")(_writer_all("%s of", "dtr", ("date", "reference", "time")))
checker("truncate")(_writer_all("%s of", "sr", ("size", "reference")))
