"""Real Megatron-LM on this host's CPU: where its source is, and the tiny-GPT recipe that runs it.

The source is the user's own checkout (``ATTUNE_MEGATRON_DIR``), or a ``git archive`` of a Megatron-LM
tag (``ATTUNE_MEGATRON_ARCHIVE``, or ``megatron-lm/core_v0.16.1.tar.gz`` under ``ATTUNE_CORPUS_DIR``)
unpacked once into a cache (``ATTUNE_CACHE_DIR``, default ``~/.cache/attune``). Megatron-LM is another
project's code: it is read where it is and never copied into this repository.

The recipe (``harness/recipes/gpt_tiny_cpu.yaml``) runs Megatron-LM's own ``pretrain_gpt.py`` with
``torchrun`` over gloo; every run of a campaign on it goes through the ``cpu`` pod hook
(``ATTUNE_POD_HOOKS=cpu``), so every number it gives is a real program's, measured on a CPU.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent / "skill" / "scripts"
RECIPE = HERE / "recipes" / "gpt_tiny_cpu.yaml"
ARCHIVE = "megatron-lm/core_v0.16.1.tar.gz"
ARCHIVE_SHA256 = "e3ab550d6238836b3ccb9692374f54d928d71dd2fa19aa06179a269467d6212b"
# what Megatron-LM's training loop imports beyond torch and numpy (the `megatron` extra installs them)
PACKAGES = ("six", "regex", "yaml", "pydantic", "tqdm", "pybind11", "triton")  # triton only has to import


class Unavailable(Exception):
    """No Megatron-LM source here: the message says what to set."""


def _archive() -> Path:
    given = os.environ.get("ATTUNE_MEGATRON_ARCHIVE")
    if given:
        path = Path(given)
        if not path.is_file():
            raise Unavailable("ATTUNE_MEGATRON_ARCHIVE=%s: no such file. Fix: give a `git archive` tarball of a "
                              "Megatron-LM tag, or set ATTUNE_MEGATRON_DIR to a checkout" % given)
        return path
    corpus = os.environ.get("ATTUNE_CORPUS_DIR")
    if corpus and (Path(corpus) / ARCHIVE).is_file():
        return Path(corpus) / ARCHIVE
    raise Unavailable("no Megatron-LM source: ATTUNE_MEGATRON_DIR is unset%s. Fix: set ATTUNE_MEGATRON_DIR to a "
                      "Megatron-LM checkout (tested: tag core_v0.16.1), or ATTUNE_MEGATRON_ARCHIVE to a `git archive` "
                      "tarball of one" % (" and ATTUNE_CORPUS_DIR=%s has no %s" % (corpus, ARCHIVE) if corpus else ""))


def cache_dir() -> Path:
    return Path(os.environ.get("ATTUNE_CACHE_DIR") or Path.home() / ".cache" / "attune")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _unpack(archive: Path) -> Path:
    """The archive's one top folder, unpacked under the cache once (atomically: a rename)."""
    digest = _sha256(archive)
    if archive.name == Path(ARCHIVE).name and digest != ARCHIVE_SHA256:
        raise Unavailable("%s: sha256 %s, not the %s of Megatron-LM core_v0.16.1. Fix: fetch the archive again"
                          % (archive, digest, ARCHIVE_SHA256))
    target = cache_dir() / ("megatron-lm-%s" % digest[:16])
    if (target / "pretrain_gpt.py").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".unpack-", dir=str(target.parent)))
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]  # no links, devices or fifos
            tops = {Path(m.name).parts[0] for m in members}
            if any(Path(m.name).is_absolute() or ".." in Path(m.name).parts for m in members) or len(tops) != 1:
                raise Unavailable("%s: not a `git archive --prefix=DIR/` tarball (one top folder, relative paths)"
                                  % archive)
            tar.extractall(str(scratch), members=members)
        try:
            os.rename(str(scratch / tops.pop()), str(target))
        except OSError:  # another process unpacked it first
            if not (target / "pretrain_gpt.py").is_file():
                raise
    finally:
        shutil.rmtree(str(scratch), ignore_errors=True)
    return target


def find() -> Path:
    """The Megatron-LM source folder (the one holding ``pretrain_gpt.py``), or Unavailable saying what to set."""
    given = os.environ.get("ATTUNE_MEGATRON_DIR")
    if given:
        path = Path(given).resolve()
        if not (path / "pretrain_gpt.py").is_file():
            raise Unavailable("ATTUNE_MEGATRON_DIR=%s has no pretrain_gpt.py. Fix: point it at a Megatron-LM checkout"
                              % given)
        return path
    return _unpack(_archive())


def missing_packages(python: str = sys.executable) -> list:
    """The packages Megatron-LM's training loop needs that ``python`` cannot import."""
    code = ("import importlib.util, sys; print(' '.join(n for n in sys.argv[1:] "
            "if importlib.util.find_spec(n) is None))")
    done = subprocess.run([python, "-c", code, "torch", "numpy"] + list(PACKAGES), stdout=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    return done.stdout.split()


def build_helpers(megatron: Path, python: str = sys.executable) -> None:
    """Compile Megatron's dataset helpers once, before any run (two runs at once would both write the library)."""
    code = ("import subprocess, sys; sys.path.insert(0, sys.argv[1]); from pod_hooks import cpu; "
            "cpu.job_interpreter_first(); sys.exit(subprocess.call(['make', '-s', '-C', sys.argv[2]]))")
    done = subprocess.run([python, "-c", code, str(SCRIPTS), str(megatron / "megatron" / "core" / "datasets")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=600)
    if done.returncode != 0:
        raise Unavailable("building Megatron's dataset helpers in %s failed (a C++ compiler, make and pybind11 are "
                          "needed):\n%s" % (megatron, done.stdout[-2000:]))


def recipe_text(megatron: Path, python: str = sys.executable) -> str:
    """The tiny-GPT recipe with this Megatron-LM and this Python filled in."""
    return RECIPE.read_text(encoding="utf-8").format(python=python, megatron=megatron)
