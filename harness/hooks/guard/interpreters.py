"""Interpreter one-liners: ``python -c``, perl, ruby, node and awk programs given on the command
line or on stdin are scanned for calls that write files or run kubectl; a write that names a
protected campaign file, or code that could reach kubectl, is denied.
"""

import re

from .context import checker, Deny, mentions_kubectl, mentions_protected, NOTES
from .paths import check_write, read_virtual
from .commands import split_opts


# ------------------------------------------------------------------------------------- interpreters
_WRITE_CALL = re.compile("|".join([
    r"""\bopen\s*\([^)]*?['"][rbt]*[wax+][rwxabt+]*['"]""",              # open(p, 'w'), File.open(p, "a")
    r"""\bopen\s*\(?[^;]*?['"]\s*(\+<|\+?>{1,2}|\|)""",                   # perl open(F, ">>p")
    r"""(?<!stdout)(?<!stderr)\.write\w*\s*\(""",                        # f.write(, write_text(, writelines(
    r"""\bos\.(remove|unlink|rename|renames|replace|rmdir|removedirs|chmod|chown|lchown|truncate|ftruncate|"""
    r"""symlink|link|mkdir|makedirs|utime|system|popen|exec\w*|spawn\w*)\b""",
    r"""\b(shutil|subprocess|FileUtils|child_process)\b""",
    r"""\.(unlink|rename|touch|chmod|rmdir|symlink_to|hardlink_to|mkdir|truncate)\s*\(""",
    r"""\b(unlink|rename|chmod|chown|truncate|rmtree|sysopen|system|exec|qx)\b""",
    r"""(?<![\w.])(remove|write)\s*\(""",                                   # from os import remove; remove(p)
    r"""\bFile\.(write|open|delete|unlink|rename|chmod|truncate|symlink)\b""",
    r"""\bfs\.(write|append|unlink|rm|rename|chmod|truncate|copyFile|cp|symlink|link|mkdir|createWriteStream|"""
    r"""open)\w*""",
    r"""\.(appendFile|writeFile|unlink|rm|rename|chmod|truncate|copyFile|symlink|createWriteStream)(Sync)?\s*\(""",
    r"""\bprintf?\b[^;{}]*?>""",                                         # awk: print > "file"
]))


def _check_code(ctx, lang, code, inplace_files=()):
    if code is None:
        return
    if mentions_kubectl(code):
        raise Deny("guard: this %s code runs kubectl where the guard cannot check it (unparsable); run kubectl "
                    "directly, spelled out, with --context %s -n %s."
                    % (lang, ctx.setting("ATTUNE_KUBE_CONTEXT") or "CONTEXT",
                       ctx.setting("ATTUNE_NAMESPACE") or "NAMESPACE"))
    for w in inplace_files:
        check_write(ctx, w, "%s in-place edit of" % lang)
    # A write call and a protected name in the same statement, or a write through a variable that
    # holds a protected path (p = 'ledger.jsonl'; open(p, 'a')). A script that reads the ledger and
    # writes elsewhere passes.
    tainted = {}
    for statement in re.split(r"[;\n]", code):
        mention = mentions_protected(statement)
        assign = re.match(r"^\s*(?:my\s+|let\s+|const\s+|var\s+)?\$?([A-Za-z_]\w*)\s*=(?!=)", statement)
        if assign and mention and not re.search(r"open\s*\(|read|load", statement):
            tainted[assign.group(1)] = mention.group(0)
        if not _WRITE_CALL.search(statement):
            continue
        name = mention.group(0) if mention else None
        for variable, held in tainted.items():
            if name is None and re.search(r"(?<![\w$])\$?%s\b" % re.escape(variable), statement):
                name = held
        if name:
            raise Deny("guard: this %s code writes and names the protected campaign file %s; records are written "
                        "only by attune verbs (add a note with `attune note TEXT`); %s."
                        % (lang, name.strip("'\""), NOTES))


@checker(pattern=r"^(python|pypy)[0-9.]*$")
def _python(prog, args, env, stdin, ctx, depth):
    i = 0
    n = len(args)
    code = None
    script = None
    module = False
    while i < n:
        w = args[i]
        t = w.text
        if t == "-":
            code = stdin
            break
        if t.startswith("--") or not t.startswith("-") or not w.known:
            if not t.startswith("-"):
                script = w
                break
            i += 1
            continue
        flags = t[1:]
        took_next = False
        done = False
        for k, ch in enumerate(flags):
            if ch == "c":
                rest = flags[k + 1:]
                code = rest if rest else (args[i + 1].text if i + 1 < n else "")
                done = True
                break
            if ch == "m":
                module = True
                done = True
                break
            if ch in "WX":
                took_next = not flags[k + 1:]
                break
        if done:
            break
        i += 2 if took_next else 1
    else:
        if not module and code is None and script is None:
            code = stdin
    if script is not None:
        code = read_virtual(ctx, script)
    _check_code(ctx, prog, code)


def _perl_like(prog, args, stdin, ctx, code_flags, value_flags):
    codes = []
    inplace = False
    i = 0
    n = len(args)
    while i < n:
        w = args[i]
        t = w.text
        if t == "--":
            i += 1
            break
        if not (t.startswith("-") and len(t) > 1 and w.known) or t.startswith("--"):
            if t.startswith("--"):
                i += 1
                continue
            break
        flags = t[1:]
        took_next = False
        k = 0
        while k < len(flags):
            ch = flags[k]
            if ch in code_flags:
                rest = flags[k + 1:]
                if rest:
                    codes.append(rest)
                elif i + 1 < n:
                    codes.append(args[i + 1].text)
                    took_next = True
                break
            if ch == "i":
                inplace = True
                rest = flags[k + 1:]
                if any(c in rest for c in code_flags) and i + 1 < n:  # -pie: perl reads 'e' as a suffix;
                    codes.append(args[i + 1].text)                     # be safe and take the code anyway
                    took_next = True
                break
            if ch in value_flags:
                took_next = not flags[k + 1:] and ch in "IrC"
                break
            k += 1
        i += 2 if took_next else 1
    operands = args[i:]
    if not codes:
        if operands:
            codes.append(read_virtual(ctx, operands[0]) or "")
            operands = operands[1:]
        elif stdin is not None:
            codes.append(stdin)
    _check_code(ctx, prog, "\n".join(codes), operands if inplace else ())


@checker("perl")
def _perl(prog, args, env, stdin, ctx, depth):
    _perl_like(prog, args, stdin, ctx, "eE", "IMmxlF0CdDV")


@checker("ruby")
def _ruby(prog, args, env, stdin, ctx, depth):
    _perl_like(prog, args, stdin, ctx, "e", "IrCEFTxW0")


@checker("node", "nodejs")
def _node(prog, args, env, stdin, ctx, depth):
    i = 0
    n = len(args)
    code = None
    script = None
    while i < n:
        t = args[i].text
        if t in ("-e", "--eval", "-p", "--print"):
            code = args[i + 1].text if i + 1 < n else ""
            break
        match = re.match(r"^--(eval|print)=(.*)$", t, re.S)
        if match:
            code = match.group(2)
            break
        if t in ("-r", "--require", "--import", "--loader"):
            i += 2
            continue
        if t.startswith("-"):
            i += 1
            continue
        script = args[i]
        break
    if code is None:
        code = read_virtual(ctx, script) if script is not None else stdin
    _check_code(ctx, prog, code)


@checker("awk", "gawk", "mawk", "nawk")
def _awk(prog, args, env, stdin, ctx, depth):
    opts, operands = split_opts(args, "fvFiEl", ("file", "assign", "field-separator", "include", "exec", "load"))
    inplace = any(name in ("i", "include") and value is not None and value.text == "inplace" for name, value in opts)
    program = None
    if not any(name in ("f", "file", "E", "exec") for name, _ in opts) and operands:
        program = operands[0].text
        operands = operands[1:]
    _check_code(ctx, prog, program, operands if inplace else ())
