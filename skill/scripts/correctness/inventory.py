"""Which command-line arguments a Megatron-LM or slime source tree defines, and which of them the gate's
rules do not class.

The gate counts an unlisted argument as numeric (rules/README.md), which is safe but rejects a legitimate
change whose flag nobody classed. ``attune gate --coverage DIR`` reads a checkout's own argument
definitions and names every flag that has no entry, so a user on another release sees them before a
campaign does.

* Megatron-LM: the parser Megatron itself builds (``megatron.training.arguments.add_megatron_arguments``,
  whose argument groups since core_v0.16 are partly generated from configuration dataclasses, so the
  source text alone does not list them), built in a child Python process with the checkout first on its
  path. This needs the packages Megatron imports at parse time (torch).
* slime: its own arguments, read from the source (``add_argument`` calls with literal flag names in the
  package's ``arguments.py`` files). The ``--sglang-*`` arguments slime generates from SGLang's
  ``ServerArgs`` are SGLang's, not slime's, and are not listed by this reading.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterable

# Run in a child process: Megatron's import registers CUDA extensions and global state, and a
# checkout's own modules must not be mixed with another's. Two shims let older and newer releases
# import on this interpreter: ``typing.override`` (Python 3.12) and a CUDA architecture list for
# torch's extension helper on a host without CUDA.
_MEGATRON_SNIPPET = r"""
import argparse, json, sys, typing, warnings
warnings.filterwarnings("ignore")
if not hasattr(typing, "override"):
    typing.override = lambda function: function
sys.argv = ["megatron"]
sys.path.insert(0, %r)
from megatron.training.arguments import add_megatron_arguments
parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
names = sorted({name for action in parser._actions for name in action.option_strings
                if name.startswith("--") and name != "--help"})
print("ATTUNE-ARGS " + json.dumps(names))
"""


class InventoryError(Exception):
    """The source tree could not be read; the message names it and says why."""


def megatron_arguments(root, timeout_s: float = 300.0) -> list:
    """Every ``--flag`` Megatron-LM's parser at ``root`` (a checkout: the folder holding ``megatron/``)
    accepts, sorted."""
    root = Path(root).resolve()
    source = root / "megatron" / "training" / "arguments.py"
    if not source.is_file():
        raise InventoryError("%s: not a Megatron-LM checkout (no megatron/training/arguments.py)" % root)
    env = dict(os.environ)
    env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    env["PYTHONPATH"] = str(root)
    try:
        done = subprocess.run([sys.executable, "-c", _MEGATRON_SNIPPET % str(root)], cwd=str(root), env=env,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise InventoryError("%s: Megatron-LM's argument parser was not built within %.0f s" % (source, timeout_s))
    for line in done.stdout.splitlines():
        if line.startswith("ATTUNE-ARGS "):
            return json.loads(line[len("ATTUNE-ARGS "):])
    tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    raise InventoryError("%s: Megatron-LM's argument parser could not be built in this Python (%s): %s. Fix: run "
                         "it where the checkout's packages (torch) import" % (source, sys.executable, tail))


def _literal_flags(args) -> list:
    return [arg.value for arg in args
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--")]


def slime_arguments(root) -> list:
    """Every ``--flag`` slime at ``root`` (a checkout: the folder holding ``slime/``) defines itself,
    sorted: the literal names of the ``add_argument`` and ``reset_arg`` calls in its ``arguments.py``
    files."""
    root = Path(root).resolve()
    package = root / "slime"
    files = sorted(package.rglob("arguments.py")) if package.is_dir() else []
    if not files:
        raise InventoryError("%s: not a slime checkout (no slime/**/arguments.py)" % root)
    names = set()
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (OSError, SyntaxError, ValueError) as exc:
            raise InventoryError("%s: cannot be read as Python (%s)" % (path, exc))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name == "add_argument":
                names.update(_literal_flags(node.args))
            elif name == "reset_arg":  # reset_arg(parser, "--flag", ...)
                names.update(_literal_flags(node.args[1:2]))
    return sorted(name for name in names if name != "--help")


def unclassed(rules, names: Iterable[str]) -> list:
    """The names among ``names`` that no rule classes (as arguments)."""
    return sorted(name for name in set(names) if rules.get("arg", name) is None)


INVENTORY_FILE = Path(__file__).resolve().parent / "rules" / "arguments.json"


def load_inventory(path=INVENTORY_FILE) -> dict:
    """The recorded argument lists of the releases the rules were checked against (rules/arguments.json)."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def slime_flags(path=INVENTORY_FILE) -> frozenset:
    """Every flag a slime recipe may set: slime's own and those of the Megatron-LM it pins and passes them to
    (the recorded ``slime`` and ``slime-pinned-*`` releases); ``--sglang-*`` are SGLang's and not listed."""
    flags = set()
    for release in load_inventory(path)["releases"]:
        if release["stack"] == "slime" or release["release"].startswith("slime-pinned"):
            flags.update(release["arguments"])
    return frozenset(flags)


def read_arguments(stack: str, root) -> list:
    if stack == "megatron":
        return megatron_arguments(root)
    if stack == "slime":
        return slime_arguments(root)
    raise InventoryError("stack %r: give megatron or slime" % stack)


def main(argv=None) -> int:
    """Record a release's arguments in rules/arguments.json (replacing that release's entry)."""
    import argparse
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("stack", choices=["megatron", "slime"])
    parser.add_argument("root", help="the checkout (the folder holding megatron/ or slime/)")
    parser.add_argument("--release", required=True, help="its tag, or a name for a commit (slime's pinned Megatron)")
    parser.add_argument("--commit", required=True, help="the full commit id the checkout is at")
    parser.add_argument("--repository", required=True)
    parser.add_argument("--note", default="", help="how the tree differs from the commit (a patch applied)")
    opts = parser.parse_args(argv)
    names = read_arguments(opts.stack, opts.root)
    data = load_inventory() if INVENTORY_FILE.exists() else {"version": 1, "releases": []}
    entry = {"stack": opts.stack, "release": opts.release, "repository": opts.repository, "commit": opts.commit,
             "read": ("Megatron-LM's own parser: megatron.training.arguments.add_megatron_arguments"
                      if opts.stack == "megatron" else "the add_argument calls of slime/**/arguments.py"),
             "note": opts.note, "arguments": names}
    data["releases"] = [r for r in data["releases"] if (r["stack"], r["release"]) != (opts.stack, opts.release)]
    data["releases"].append(entry)
    data["releases"].sort(key=lambda r: (r["stack"], r["release"]))
    INVENTORY_FILE.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print("%s %s: %d arguments recorded in %s" % (opts.stack, opts.release, len(names), INVENTORY_FILE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
