"""Command analysis: each simple command of a parsed line is checked, its redirections and
environment assignments included, then dispatched on its program (``run_words``, through
``dispatch._PROGRAMS``). The wrappers that run another command (env, timeout, nohup, nice, sudo,
doas, time, command, exec, stdbuf, ionice, xargs, watch, ``bash -c``, eval, source, alias) are
looked through, and export and cd update what the guard knows of the environment and the
working directory.
"""

import fnmatch
import os
import re
import shlex

from .context import (checker, 
    PROGRAMS, PROGRAM_PATTERNS,
    ASSIGN, Deny, GLOB_CHARS, MARK, MAX_DEPTH, mentions_kubectl, NOT_A_BOUNDARY, Unparsable)
from .lexer import Lexer, parse_script, Word
from .paths import check_write, read_path, read_real, read_virtual, resolve_path


# ------------------------------------------------------------------------------ command analysis
def _nested(text, ctx, depth):
    """Check ``text`` as a shell script run from here (its cd's do not leak out)."""
    saved = list(ctx.bases)
    try:
        analyze_text(text, ctx, depth)
    finally:
        ctx.bases = saved


def analyze_text(text, ctx, depth):
    if depth > MAX_DEPTH:
        raise Deny("guard: the command nests shells, substitutions, aliases or evals too deeply to check; "
                    "write it more plainly (%s)." % NOT_A_BOUNDARY)
    lexer = Lexer(text).run()
    for sub in lexer.subs:
        _nested(sub, ctx, depth + 1)
    stack = []
    for kind, cmd in parse_script(lexer.tokens):
        if kind == "push":
            stack.append(list(ctx.bases))
        elif kind == "pop":
            if stack:
                ctx.bases = stack.pop()
        else:
            _analyze_command(cmd, ctx, depth)


_RESERVED = frozenset(("!", "{", "}", "then", "do", "else", "elif", "if", "while", "until", "fi", "done", "esac"))
_NOT_COMMANDS = frozenset(("for", "case", "select", "function", "[[", "]]"))


def kubeconfig_reason(ctx):
    return ("guard: the campaign uses the default kubeconfig; KUBECONFIG and --kubeconfig are not allowed. "
            "Drop them and pass --context %s -n %s." % (ctx.setting("ATTUNE_KUBE_CONTEXT") or "CONTEXT",
                                                       ctx.setting("ATTUNE_NAMESPACE") or "NAMESPACE"))


def _analyze_command(cmd, ctx, depth):
    for redir in cmd.redirs:
        if redir.writes:
            check_write(ctx, redir.target, "writing with %s into" % redir.op)
    words = list(cmd.words)
    while words and words[0].text in _RESERVED and words[0].raw == words[0].text:
        words.pop(0)
    if words and words[0].text in _NOT_COMMANDS:
        return
    env = {}
    while words and ASSIGN.match(words[0].raw):
        name = re.split(r"[\[+=]", words[0].raw, maxsplit=1)[0]
        if name == "KUBECONFIG":
            raise Deny(kubeconfig_reason(ctx))
        env[name] = words[0].text.split("=", 1)[1] if "=" in words[0].text else ""
        words.pop(0)
    if not words:
        return
    stdin = _stdin_of(cmd, ctx)
    run_words(words, env, stdin, ctx, depth)
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
            have, text = True, read_path(ctx, redir.target)
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
    while words and ASSIGN.match(words[0].raw):
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
            part = _stdin_of(cmd, ctx) if a.text == "-" else read_path(ctx, a)
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
        opts, operands = split_opts(words[1:])
        append = any(name in ("a", "append") for name, _ in opts)
        for operand in operands:
            if operand.known:
                _remember(ctx, operand, stdin, append)


def _remember(ctx, word, text, append):
    path = resolve_path(ctx, word.text)
    if text is not None and append:
        before = ctx.virtual[path] if path in ctx.virtual else read_real(path)
        text = None if (path in ctx.virtual and before is None) else (before or "") + text
    ctx.virtual[path] = text


def _requote(word):
    return shlex.quote(word.text)


def _unresolvable(ctx, why):
    if mentions_kubectl(ctx.root_text):
        raise Deny("guard: cannot parse what this command runs (%s) and it involves kubectl, so the guard cannot "
                    "check it (unparsable). Run kubectl directly, spelled out, with --context %s -n %s."
                    % (why, ctx.setting("ATTUNE_KUBE_CONTEXT") or "CONTEXT",
                       ctx.setting("ATTUNE_NAMESPACE") or "NAMESPACE"))


def run_words(words, env, stdin, ctx, depth):
    """Check one command: ``words`` (program first) with its environment assignments and stdin."""
    if depth > MAX_DEPTH:
        raise Deny("guard: the command nests wrappers too deeply to check; write it more plainly.")
    first = words[0]
    args = words[1:]
    if not first.known:
        _unresolvable(ctx, "its program comes from a variable or a substitution")
        return
    prog = os.path.basename(first.text) if "/" in first.text.rstrip("/") else first.text
    if first.glob and GLOB_CHARS.search(prog):
        # a pattern as the program (k*ctl); a bare * or ? is a case pattern, not a program
        if re.search(r"[A-Za-z]", prog) and fnmatch.fnmatchcase("kubectl", prog):
            raise Deny("guard: the program pattern %s may run kubectl (unparsable); spell kubectl out." % prog)
        return
    if prog in ctx.aliases and prog not in ctx.expanding:
        ctx.expanding.add(prog)
        try:
            _nested(ctx.aliases[prog] + "".join(" " + _requote(w) for w in args), ctx, depth + 1)
        finally:
            ctx.expanding.discard(prog)
        return
    handler = PROGRAMS.get(prog)
    if handler is None:
        handler = next((check for pattern, check in PROGRAM_PATTERNS if pattern.match(prog)), None)
    if handler is not None:
        handler(prog, args, env, stdin, ctx, depth)


def split_opts(args, short_val="", long_val=(), stop_at_operand=False):
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
        run_words(rest, env, stdin, ctx, depth + 1)


@checker("nohup", "builtin")
def _plain_wrapper(prog, args, env, stdin, ctx, depth):
    _wrap(args, env, stdin, ctx, depth)


@checker("env")
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
    while i < n and ASSIGN.match(args[i].text):
        name = re.split(r"[\[+=]", args[i].text, maxsplit=1)[0]
        if name == "KUBECONFIG":
            raise Deny(kubeconfig_reason(ctx))
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
            analyze_text(split + "".join(" " + _requote(w) for w in rest), ctx, depth + 1)
        else:
            _wrap(rest, env, stdin, ctx, depth)
    finally:
        ctx.bases = saved


@checker("timeout")
def _timeout(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "sk", ("signal", "kill-after"), stop_at_operand=True)
    _wrap(operands[1:], env, stdin, ctx, depth)


@checker("nice")
def _nice(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "n", ("adjustment",), stop_at_operand=True)
    _wrap(operands, env, stdin, ctx, depth)


@checker("sudo")
def _sudo(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "ugpChDrTUt", ("user", "group", "prompt", "close-from", "chdir", "role",
                                                    "type", "command-timeout", "other-user", "host"),
                                 stop_at_operand=True)
    env = dict(env)
    while operands and ASSIGN.match(operands[0].text):
        name = re.split(r"[\[+=]", operands[0].text, maxsplit=1)[0]
        if name == "KUBECONFIG":
            raise Deny(kubeconfig_reason(ctx))
        env[name] = operands[0].text.split("=", 1)[1]
        operands = operands[1:]
    _wrap(operands, env, stdin, ctx, depth)


@checker("doas")
def _doas(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "uC", (), stop_at_operand=True)
    _wrap(operands, env, stdin, ctx, depth)


@checker("time")
def _time(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "fo", ("format", "output"), stop_at_operand=True)
    for name, value in opts:
        if name in ("o", "output"):
            check_write(ctx, value, "time -o writing")
    _wrap(operands, env, stdin, ctx, depth)


@checker("command")
def _command(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "", (), stop_at_operand=True)
    if any(name in ("v", "V") for name, _ in opts):
        return  # command -v NAME only looks the name up
    _wrap(operands, env, stdin, ctx, depth)


@checker("setsid", "exec")
def _exec(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "a", (), stop_at_operand=True)
    _wrap(operands, env, stdin, ctx, depth)


@checker("stdbuf")
def _stdbuf(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "ioe", ("input", "output", "error"), stop_at_operand=True)
    _wrap(operands, env, stdin, ctx, depth)


@checker("ionice")
def _ionice(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "cnpPu", ("class", "classdata", "pid", "pgid", "uid"), stop_at_operand=True)
    _wrap(operands, env, stdin, ctx, depth)


@checker("xargs")
def _xargs(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "IELnPsdal", ("replace", "eof", "max-lines", "max-args", "max-procs",
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
    run_words(words, env, None, ctx, depth + 1)


@checker("watch")
def _watch(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "nq", ("interval", "differences"), stop_at_operand=True)
    if any(name in ("x", "exec") for name, _ in opts):
        _wrap(operands, env, stdin, ctx, depth)
    elif operands:
        _nested(" ".join(w.text for w in operands), ctx, depth + 1)


@checker("bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "yash", "fish")
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
                    raise Unparsable("%s -c without a command" % prog)
                _nested(args[i + 1].text, ctx, depth + 1)
                return
            i += 2 if ("o" in flags or "O" in flags) else 1
            continue
        break
    operands = args[i:]
    if operands and not from_stdin:
        script = read_virtual(ctx, operands[0])
        if script is not None:
            _nested(script, ctx, depth + 1)
        elif not operands[0].known:
            _unresolvable(ctx, "%s runs a script named by a variable" % prog)
        return
    if stdin is not None:
        _nested(stdin, ctx, depth + 1)
    else:
        _unresolvable(ctx, "%s reads its commands from input the guard cannot see" % prog)


@checker("eval")
def _eval(prog, args, env, stdin, ctx, depth):
    text = " ".join(w.text for w in args)
    if mentions_kubectl(text) or (MARK in text and mentions_kubectl(ctx.root_text)):
        raise Deny("guard: eval hides what runs and this command involves kubectl, so the guard cannot check it "
                    "(unparsable). Run kubectl directly, spelled out, with --context %s -n %s."
                    % (ctx.setting("ATTUNE_KUBE_CONTEXT") or "CONTEXT", ctx.setting("ATTUNE_NAMESPACE") or "NAMESPACE"))
    _nested(text, ctx, depth + 1)


@checker("source", ".")
def _source(prog, args, env, stdin, ctx, depth):
    if not args:
        return
    script = read_virtual(ctx, args[0])
    if script is not None:
        analyze_text(script, ctx, depth + 1)
    elif not args[0].known:
        _unresolvable(ctx, "it sources a file named by a variable")


@checker("alias")
def _alias(prog, args, env, stdin, ctx, depth):
    for w in args:
        name, eq, value = w.text.partition("=")
        if not eq or name.startswith("-"):
            continue
        if MARK in value and (mentions_kubectl(value) or mentions_kubectl(ctx.root_text)):
            _unresolvable(ctx, "the alias %s is built from a variable" % name)
        ctx.aliases[name] = value
        _nested(value, ctx, depth + 1)  # what the alias would run, checked as if run now


@checker("export", "declare", "typeset", "local", "readonly")
def _export(prog, args, env, stdin, ctx, depth):
    for w in args:
        if re.match(r"^KUBECONFIG\+?=", w.text):
            raise Deny(kubeconfig_reason(ctx))


def _unknown_bases(ctx):
    out = list(ctx.bases)
    for extra in (ctx.campaign, ctx.event_cwd):
        if extra not in out:
            out.append(extra)
    return out


@checker("cd", "pushd", "popd")
def _cd(prog, args, env, stdin, ctx, depth):
    if prog == "popd":
        ctx.bases = _unknown_bases(ctx)
        return
    opts, operands = split_opts(args)
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
