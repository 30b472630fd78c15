"""The package's layers point only down, and everything it installs lives under one top-level name, ``attune``.

Every import in ``skill/scripts`` (at module level or inside a function) is resolved to the subpackage it
names; the kernel (``core``) imports no other part, the domains only the kernel, ``simulate`` the kernel and
the domains, the campaign all of those, and the CLI and the planner sit on top without importing each other.
``pod_hooks`` runs inside training pods and imports nothing else of ours. The checker is also run on small
trees with an import that points up, sideways or outside the namespace, to show it refuses each."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent
REPO = SCRIPTS.parent.parent

LAYERS = (
    ("core",),
    ("correctness", "projection", "data", "profile_analyzer", "pod_hooks"),
    ("simulate",),
    ("campaign",),
    ("cli", "planner"),
)
ISOLATED = {"pod_hooks": ()}  # what a package may import beyond itself, where that is less than its layer allows
LAYER = {package: index for index, names in enumerate(LAYERS) for package in names}
ROOT_NAMES = {"__version__"}  # what a module may take from the root package (``import attune`` loads it)


def _modules(root: Path):
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if "tests" in parts or "__pycache__" in parts or parts == ("attune.py",):
            continue
        dotted = ["attune"] + [p for p in parts[:-1]] + ([] if parts[-1] == "__init__.py" else [parts[-1][:-3]])
        yield path, ".".join(dotted), parts[-1] == "__init__.py"


def _imports(path: Path, module: str, is_package: bool):
    """``(line, imported name, names taken from it)`` of every import statement in the file."""
    base = module if is_package else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                name = ".".join(parts + ([node.module] if node.module else []))
            else:
                name = node.module
            yield node.lineno, name, tuple(alias.name for alias in node.names)


def violations(root: Path) -> list:
    """Every import in the tree at ``root`` (laid out as ``skill/scripts``) that breaks the layering."""
    local = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    problems = []
    for path, module, is_package in _modules(root):
        where = "%s:%%d" % path.relative_to(root)
        mine = module.split(".")[1] if module.count(".") else ""
        for line, name, taken in _imports(path, module, is_package):
            top = name.split(".")[0]
            if top in local:
                problems.append((where % line, "imports %s outside the attune namespace: import attune.%s"
                                 % (name, name)))
                continue
            if top != "attune":
                continue
            parts = name.split(".")
            if len(parts) == 1 or (len(parts) == 2 and parts[1] not in LAYER):
                if parts == ["attune"] and (not taken or set(taken) <= ROOT_NAMES):
                    continue  # the root package: the loader (``import attune``) and its version
                problems.append((where % line, "takes %s from the root package, which only re-exports"
                                 % ", ".join(taken or (name,))))
                continue
            target = parts[1]
            if not mine or target == mine:
                continue
            allowed = ISOLATED.get(mine)
            if allowed is not None and target not in allowed:
                problems.append((where % line, "%s imports attune.%s: it imports nothing else of ours"
                                 % (mine, target)))
            elif LAYER[target] >= LAYER[mine]:
                problems.append((where % line, "%s (layer %d) imports attune.%s (layer %d): imports point only down"
                                 % (mine, LAYER[mine], target, LAYER[target])))
    return problems


def test_every_import_points_down():
    assert violations(SCRIPTS) == []


def test_every_subpackage_has_a_layer():
    packages = {p.name for p in SCRIPTS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYER)


def _tree(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in LAYER:
        init = tmp_path / package / "__init__.py"
        init.parent.mkdir(exist_ok=True)
        if not init.exists():
            init.write_text("")
    (tmp_path / "__init__.py").write_text("__version__ = '0'\n")
    return tmp_path


@pytest.mark.parametrize("path, source, expected", [
    ("core/recipe.py", "from attune.campaign import ranking\n", "core (layer 0) imports attune.campaign (layer 3)"),
    ("core/recipe.py", "def f():\n    from ..projection import api\n", "core (layer 0) imports attune.projection"),
    ("correctness/gate.py", "from attune.projection import api\n",
     "correctness (layer 1) imports attune.projection (layer 1)"),
    ("campaign/runs.py", "from attune.cli import main\n", "campaign (layer 3) imports attune.cli (layer 4)"),
    ("cli/verbs.py", "from attune.planner import agent\n", "cli (layer 4) imports attune.planner (layer 4)"),
    ("pod_hooks/wrap.py", "from attune.core import errors\n", "pod_hooks imports attune.core"),
    ("data/rows.py", "import correctness.rules\n", "outside the attune namespace"),
    ("data/rows.py", "from attune import Campaign\n", "takes Campaign from the root package"),
])
def test_the_checker_refuses_an_import_that_points_up(tmp_path, path, source, expected):
    problems = violations(_tree(tmp_path, {path: source}))
    assert len(problems) == 1 and expected in problems[0][1], problems


def test_the_checker_accepts_imports_that_point_down(tmp_path):
    files = {"campaign/runs.py": "import attune\nfrom attune.core import errors\nfrom attune.data import rows\n"
                                 "from . import ranking\n",
             "data/rows.py": "from attune.core import __version__\nfrom ..core.errors import InputError\n",
             "planner/agent.py": "from attune.campaign import ranking\nfrom attune.simulate import noise\n"}
    assert violations(_tree(tmp_path, files)) == []


# the public surface: what ``from attune import ...`` offers, each name resolving to the object it names
SURFACE = ["AttuneError", "Campaign", "CheckFailed", "Command", "InputError", "Recipe", "Rules", "Settings",
           "__version__", "load_settings", "main"]


def test_public_surface():
    import attune
    from attune.campaign.ledger import Campaign
    from attune.cli import main
    from attune.core import errors, settings
    from attune.core.command import Command
    from attune.core.recipe import Recipe
    from attune.correctness.rules import Rules
    assert sorted(attune.__all__) == SURFACE
    expected = {"AttuneError": errors.AttuneError, "Campaign": Campaign, "CheckFailed": errors.CheckFailed,
                "Command": Command, "InputError": errors.InputError, "Recipe": Recipe, "Rules": Rules,
                "Settings": settings.Settings, "load_settings": settings.load, "main": main}
    for name, value in expected.items():
        assert getattr(attune, name) is value, name
    with pytest.raises(AttributeError, match="no attribute 'runs'"):
        getattr(attune, "runs")


def test_the_wheel_installs_one_top_level_package(tmp_path):
    """``pip install .`` puts ``attune`` (and its dist-info and console script) into site-packages and nothing
    else: the built wheel is installed into an empty folder, its subpackages import from there in an
    isolated interpreter, and no other name of this project imports."""
    source = tmp_path / "source"  # a copy of what the build reads: setuptools would leave build/ in the checkout
    shutil.copytree(str(SCRIPTS), str(source / "skill" / "scripts"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(str(REPO / name), str(source / name))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                    "-w", str(wheels), str(source)], check=True, timeout=300, cwd=tmp_path)
    (wheel,) = wheels.glob("attune-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        tops = {name.split("/")[0] for name in names}
        top_level = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert not top_level or archive.read(top_level[0]).decode().split() == ["attune"]
    assert {top for top in tops if not top.endswith(".dist-info")} == {"attune"}
    assert not [n for n in names if "/tests/" in n], "the tests folders are not installed"
    assert "attune/correctness/rules/numerics_list.yaml" in names and "attune/projection/params.json" in names
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check",
                    "--target", str(target), str(wheel)], check=True, timeout=300, cwd=tmp_path)
    assert sorted(p.name for p in target.iterdir() if p.name != "bin") == ["attune", wheel.name.split("-")[0] + "-"
                                                                          + wheel.name.split("-")[1] + ".dist-info"]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import attune, attune.correctness, attune.data, "
            "attune.pod_hooks, attune.core.chainlog; assert attune.__file__.startswith(sys.argv[1]), attune.__file__; "
            "import importlib.util as u; "
            "print(' '.join(n for n in ('correctness', 'data', 'planner', 'projection', 'simulate', 'pod_hooks', "
            "'profile_analyzer', 'core', 'campaign', 'cli', 'attune_core') "
            "if u.find_spec(n) and (u.find_spec(n).origin or '').startswith(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-I", "-c", code, str(target)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
