"""Every verb that reads a file refuses what it cannot read: exit 2, one stderr line naming the file, no traceback.

The file arguments are found in the parser: every argument whose metavar is one of ``cli.INPUT_METAVARS``
(and ``--config``, which every verb that reads settings takes). Each must have a case below, so a new
file argument without one fails ``test_every_file_argument_has_a_case``. Each case is fed the kinds of
bad input in ``KINDS``; a kind a verb legitimately reads (a log cut short still holds its iterations) is
listed in the case's ``readable`` with the exit code it gives and why. Beside the arguments, the files
verbs read from a campaign (its frozen settings, its lever catalog, the runs' recipes and candidate
records, the baseline recipe the settings name) get the same kinds.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import random
import re
import shutil
import sys
import traceback
from pathlib import Path
from typing import Callable

import pytest
from conftest import DATA, SCRIPTS
from factory import Builder, settings as make_settings

from attune import cli

# empty; 8 KiB of random bytes; prose in Latin-1 (text, not UTF-8); the valid file with one byte that is not
# UTF-8 (text formats only); the valid file cut in half; a valid file of another kind
KINDS = ("empty", "random_bytes", "latin1_text", "stray_bytes", "truncated", "wrong_kind")
REPORT_MD = ("# Campaign report: alice-llama8b\n\n| run | tokens/s/GPU | vs baseline | gate |\n|---|---|---|---|\n"
             "| r004 | 20482.9 | +6.26% | pass |\n\nShipped: `recipe.yaml` (band 1.20%). Every number is from the "
             "ledger.\n")
LATIN1 = ("Résumé de la campagne: débit par GPU, mémoire, étapes réussies et échouées.\n" * 40).encode("latin-1")
RECIPE = (DATA / "recipes" / "megatron_rayjob.yaml").read_bytes()
LOG = (DATA / "logs" / "A_iteration" / "gpt2_fp16_zh_notes.log").read_bytes()
GATE = DATA / "gate_cases" / "pass_tensor_parallel"
CONFIG = b"# a campaign on this host\nATTUNE_RUN_PREFIX=me-x-\nATTUNE_BASELINE_YAML=b.yaml\nATTUNE_BACKEND=local\n" \
         b"AUTOTUNE_BUDGET=5\n"
RULES = b"""version: 1
entries:
  - name: --micro-batch-size
    kind: arg
    class: placement
    exact: false
    stacks: [megatron]
    reason: "per-token loss: micro-batch grouping does not change the loss"
    source: "reasoned"
    justification: "every recipe in this campaign sets --calculate-per-token-loss"
"""


def bad(kind: str, valid: bytes, wrong: bytes) -> bytes:
    if kind == "empty":
        return b""
    if kind == "random_bytes":
        return random.Random(7).randbytes(8192)
    if kind == "latin1_text":
        return LATIN1
    if kind == "stray_bytes":  # the valid file with a byte that is not UTF-8 at the start of its second line
        at = valid.index(b"\n") + 1
        return valid[:at] + b"\xe9" + valid[at:]
    if kind == "truncated":
        return valid[:len(valid) // 2]
    return wrong


def trace_text(kernels: bool = True) -> bytes:
    """A small torch.profiler trace in Kineto's layout: three steps of launches and kernels (SYNTHETIC)."""
    events, corr = [], 0
    for step in range(1, 4):
        start = step * 1000
        events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d" % step, "pid": 1, "tid": 1,
                       "ts": start, "dur": 900, "args": {}})
        for k in range(3):
            corr += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": start + 10 + k * 100, "dur": 5, "args": {"correlation": corr}})
            if kernels:
                events.append({"ph": "X", "cat": "kernel", "name": "sm90_gemm_%d" % k, "pid": 0, "tid": 7,
                               "ts": start + 20 + k * 100, "dur": 80, "args": {"stream": 7, "correlation": corr}})
    meta = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}}
    head = json.dumps(meta, indent=2)[:-2]
    body = ",\n".join("  {\n    " + json.dumps(event)[1:-1] + "\n  }" for event in events)
    return (head + ',\n  "traceEvents": [\n' + body + '\n  ],\n  "traceName": "t"\n}\n').encode()


def gz(data: bytes) -> bytes:
    import gzip
    return gzip.compress(data, mtime=0)


def attune(*argv):
    """``(exit code, stdout, stderr)`` of the CLI run in this process; an exception that escapes it is a
    traceback, which the CLI must never show: it comes back as exit code None with the traceback on stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(arg) for arg in argv])
        except BaseException:  # noqa: B902 - every escape is the failure this test looks for
            code = None
            err.write(traceback.format_exc())
    return code, out.getvalue(), err.getvalue()


def assert_refused(result, named, kind, expected=2):
    code, _out, err = result
    lines = err.strip().splitlines()
    assert "Traceback" not in err, (kind, err)
    assert code == expected, (kind, code, err)
    assert len(lines) == 1, (kind, lines)
    assert str(named) in lines[0], (kind, named, lines[0])


# ---------------------------------------------------------------------------------------- the cases
def _written(path, data: bytes):
    path.write_bytes(data)
    return path


@dataclasses.dataclass
class Case:
    """One file a verb reads. ``write(tmp, data)`` puts ``data`` where the verb will read it and returns
    ``(argv, the path its error line must name)``; ``valid``/``wrong`` give a good file of this kind and a
    good file of another kind; ``readable`` maps a kind the verb reads to ``(exit code, why)``."""

    id: str
    verb: str
    arg: str  # the parser's dest of the argument that names the file (or the folder holding it)
    valid: Callable[[dict], bytes]
    wrong: Callable[[dict], bytes]
    write: Callable[[Path, bytes, dict], tuple]
    readable: dict = dataclasses.field(default_factory=dict)
    text: bool = True  # a text format: stray_bytes applies
    needs: tuple = ()  # fixtures from ``data_files`` (rows, dumps, tokenizer)

    def kinds(self):
        return [kind for kind in KINDS if self.text or kind != "stray_bytes"]


def _at(name, argv):
    """A case writer: the file is ``tmp/name``; ``argv(path, tmp, files)`` is the command line."""
    def write(tmp, data, files):
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return argv(path, tmp, files), path
    return write


def _run_dir(role, name, argv):
    """A gate case: three run directories copied from a passing gate case; ``name`` in ``role``'s is replaced."""
    def write(tmp, data, files):
        dirs = {}
        for each in ("baseline", "candidate", "repeat"):
            dirs[each] = tmp / each
            shutil.copytree(GATE / each, dirs[each])
        (dirs[role] / name).write_bytes(data)
        return argv(dirs), dirs[role] / name
    return write


def _gate_argv(dirs):
    return ["gate", "--baseline", dirs["baseline"], "--candidate", dirs["candidate"], "--repeat", dirs["repeat"]]


def _tokenizer_dir(tmp, data, files):
    target = tmp / "tok"
    shutil.copytree(files["tokenizer"], target)
    (target / "tokenizer.json").write_bytes(data)
    return ["rows", "build", "--input", files["records_jsonl"], "--tokenizer", target, "--seq-length", 128,
            "--out", tmp / "out.parquet"], target


def _manifest(tmp, data, files):
    """A copy of a whole dump folder with its manifest replaced."""
    folder = shutil.copytree(Path(files["manifest"]).parent, tmp / "dump")
    (folder / "attune_dump.json").write_bytes(data)
    return ["rows", "sha", folder / "attune_dump.json"], folder / "attune_dump.json"


def _replay(tmp, data, files):
    """A campaign whose first run is a whole-loop slime run of the simulator, and a copy of a dump folder with its
    manifest replaced: ``launch --replay-of`` that run on it."""
    folder = shutil.copytree(Path(files["manifest"]).parent, tmp / "dump")
    (folder / "attune_dump.json").write_bytes(data)
    recipe = (SCRIPTS / "simulate" / "recipes" / "qwen3_4b_grpo_h100x8.yaml").read_text().format(
        python=sys.executable, sim=SCRIPTS / "simulate" / "sim_slime.py")
    (tmp / "baseline.yaml").write_text(recipe)  # every launch is checked against the baseline (core/envpolicy.py)
    made = make_settings(ATTUNE_RUN_PREFIX="alice-x-", ATTUNE_BASELINE_YAML=str(tmp / "baseline.yaml"))
    b = Builder(tmp / "c", made, campaign_id="alice-x")
    b.launch("r001", "baseline", "slime")
    (b.campaign.run_dir("r001") / "recipe.yaml").write_text(recipe.replace(
        "--num-rollout 5 --rollout-batch-size 32", "--num-rollout 1 --rollout-batch-size 2"))
    return (["launch", "--campaign", b.campaign.dir, "--replay-of", "r001", "--rollouts",
             folder / "attune_dump.json", "--expected-gpu-hours", "0.1"], folder / "attune_dump.json")


def _file(key):
    return lambda files: Path(files[key]).read_bytes()


TRACE = lambda path, tmp, files: ["profile", path]  # noqa: E731
# a Megatron-LM checkout reduced to the function `attune gate --coverage` calls (SYNTHETIC)
MEGATRON_ARGUMENTS = (b"def add_megatron_arguments(parser):\n"
                      b"    group = parser.add_argument_group(title='distributed')\n"
                      b"    group.add_argument('--tensor-model-parallel-size', type=int, default=1)\n"
                      b"    group.add_argument('--overlap-grad-reduce', action='store_true')\n"
                      b"    return parser\n")


def _megatron_checkout(tmp, data, files):
    training = tmp / "checkout" / "megatron" / "training"
    training.mkdir(parents=True)
    (training.parent / "__init__.py").write_bytes(b"")
    (training / "__init__.py").write_bytes(b"")
    (training / "arguments.py").write_bytes(data)
    return ["gate", "--coverage", tmp / "checkout"], training / "arguments.py"


CASES = [
    Case("metrics-log", "metrics", "log", lambda f: LOG, lambda f: RECIPE,
         _at("log.txt", lambda path, tmp, files: ["metrics", path]),
         readable={"stray_bytes": (0, "stray bytes in a log are replaced, as real logs hold some"),
                   "truncated": (0, "a log cut short still holds the iterations before the cut")}),
    Case("project-recipe", "project", "recipe", lambda f: RECIPE, lambda f: LOG,
         _at("recipe.yaml", lambda path, tmp, files: ["project", path, "--hardware", "H100"])),
    Case("project-against", "project", "against", lambda f: RECIPE, lambda f: LOG,
         _at("base.yaml", lambda path, tmp, files: ["project", _written(tmp / "main.yaml", RECIPE), "--hardware", "H100",
                                                    "--against", path]),
         readable={"truncated": (0, "a recipe cut short is still a RayJob; the arguments it lost are listed as "
                                    "changes")}),
    Case("profile-trace", "profile", "traces", lambda f: trace_text(), lambda f: b'{"run": "r004", "parent": "r001"}\n',
         _at("rank0.json", TRACE),
         readable={"stray_bytes": (0, "a stray byte in a trace is replaced; its events are still read")}),
    Case("profile-trace-gz", "profile", "traces", lambda f: gz(trace_text()), lambda f: gz(REPORT_MD.encode()),
         _at("rank0.json.gz", TRACE), text=False),
    Case("profile-diff-a", "profile", "diff", lambda f: trace_text(), lambda f: b'{"run": "r004", "parent": "r001"}\n',
         _at("rank0.json", lambda path, tmp, files: ["profile", "--diff", path, files["trace"]]),
         readable={"stray_bytes": (0, "a stray byte in a trace is replaced; its events are still read")}),
    Case("profile-diff-b", "profile", "diff", lambda f: gz(trace_text()), lambda f: gz(REPORT_MD.encode()),
         _at("rank0.json.gz", lambda path, tmp, files: ["profile", "--diff", files["trace"], path]), text=False),
    Case("profile-recipe", "profile", "recipe", lambda f: RECIPE, lambda f: LOG,
         _at("recipe.yaml", lambda path, tmp, files: ["profile", files["trace"], "--recipe", path]),
         readable={"truncated": (0, "a recipe cut short is still a RayJob with an entrypoint; profile reads the "
                                    "parallel flags it still holds")}),
    Case("gate-baseline-recipe", "gate", "baseline", lambda f: (GATE / "baseline" / "recipe.yaml").read_bytes(), lambda f: LOG,
         _run_dir("baseline", "recipe.yaml", _gate_argv),
         readable={"truncated": (1, "a recipe cut short is still a RayJob; its missing arguments are changes the "
                                    "configuration check fails")}),
    Case("gate-baseline-log", "gate", "baseline", lambda f: (GATE / "baseline" / "log.txt").read_bytes(), lambda f: RECIPE,
         _run_dir("baseline", "log.txt", _gate_argv),
         readable={"stray_bytes": (0, "stray bytes in a log are replaced, as real logs hold some")}),
    Case("gate-candidate-recipe", "gate", "candidate", lambda f: (GATE / "candidate" / "recipe.yaml").read_bytes(), lambda f: LOG,
         _run_dir("candidate", "recipe.yaml", _gate_argv),
         readable={"truncated": (1, "a recipe cut short is still a RayJob; its missing arguments are changes the "
                                    "configuration check fails")}),
    Case("gate-candidate-log", "gate", "candidate", lambda f: (GATE / "candidate" / "log.txt").read_bytes(), lambda f: RECIPE,
         _run_dir("candidate", "log.txt", _gate_argv),
         readable={"stray_bytes": (0, "stray bytes in a log are replaced, as real logs hold some"),
                   "truncated": (1, "a candidate whose log stops early fails the gate's steps check")}),
    Case("gate-repeat-recipe", "gate", "repeat", lambda f: (GATE / "repeat" / "recipe.yaml").read_bytes(), lambda f: LOG,
         _run_dir("repeat", "recipe.yaml", _gate_argv),
         readable={"truncated": (0, "a repeat's recipe is read for its arguments only; the gate compares its loss")}),
    Case("gate-repeat-log", "gate", "repeat", lambda f: (GATE / "repeat" / "log.txt").read_bytes(), lambda f: RECIPE,
         _run_dir("repeat", "log.txt", _gate_argv),
         readable={"stray_bytes": (0, "stray bytes in a log are replaced, as real logs hold some"),
                   "truncated": (0, "a repeat without every step is left out of the calibration, with a warning")}),
    Case("gate-rules", "gate", "rules", lambda f: RULES, lambda f: RECIPE,
         _at("rules.yaml", lambda path, tmp, files: _gate_argv({
             each: shutil.copytree(GATE / each, tmp / each) for each in ("baseline", "candidate", "repeat")})
             + ["--rules", path])),
    Case("gate-coverage", "gate", "coverage", lambda f: MEGATRON_ARGUMENTS, lambda f: LOG, _megatron_checkout),
    Case("rows-build-input-jsonl", "rows", "input", _file("records_jsonl"), lambda f: REPORT_MD.encode(),
         _at("records.jsonl", lambda path, tmp, files: ["rows", "build", "--input", path, "--tokenizer",
                                                         files["tokenizer"], "--seq-length", 128, "--out",
                                                         tmp / "out.parquet"]), needs=("rows",)),
    Case("rows-build-input-parquet", "rows", "input", _file("records_parquet"), _file("rows"),
         _at("records.parquet", lambda path, tmp, files: ["rows", "build", "--input", path, "--tokenizer",
                                                           files["tokenizer"], "--seq-length", 128, "--out",
                                                           tmp / "out.parquet"]), text=False, needs=("rows",)),
    Case("rows-build-tokenizer", "rows", "tokenizer", _file("tokenizer_json"), lambda f: REPORT_MD.encode(),
         _tokenizer_dir, needs=("rows",)),
    Case("rows-sha-parquet", "rows", "file", _file("rows"), _file("records_parquet"),
         _at("rows.parquet", lambda path, tmp, files: ["rows", "sha", path]), text=False, needs=("rows",)),
    Case("rows-sha-manifest", "rows", "file", _file("manifest"), lambda f: b'{"run": "r004", "parent": "r001"}\n',
         _manifest, needs=("slime",)),
    Case("rows-check-parquet", "rows", "file", _file("rows"), _file("records_parquet"),
         _at("rows.parquet", lambda path, tmp, files: ["rows", "check", path, "--campaign", tmp / "none"]),
         text=False, needs=("rows",)),
    Case("rows-from-slime", "rows", "file", _file("dump"), _file("rows"),
         _at("0.pt", lambda path, tmp, files: ["rows", "from-slime", path, "--out", tmp / "out.parquet"]),
         text=False, needs=("slime",)),
    Case("launch-rollouts", "launch", "rollouts", _file("manifest"), lambda f: b'{"run": "r004", "parent": "r001"}\n',
         _replay, needs=("slime",)),
    Case("rows-to-slime", "rows", "file", _file("slime_rows"), _file("rows"),
         _at("rows.parquet", lambda path, tmp, files: ["rows", "to-slime", path, "--out", tmp / "dump"]),
         text=False, needs=("slime",)),
]


# ---------------------------------------------------------------------------------------- the parser
def _subparsers():
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def _actions(parser):
    """A parser's arguments, and its subcommands' (``attune rows build``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _actions(sub)
        else:
            yield action


def file_arguments() -> set:
    """``(verb, dest)`` of every argument that names a file or folder a verb (or one of its subcommands) reads."""
    found = set()
    for verb, sub in _subparsers().items():
        for action in _actions(sub):
            if action.metavar in cli.INPUT_METAVARS and action.dest != "campaign":
                found.add((verb, action.dest))
    return found


def config_verbs() -> list:
    return sorted(verb for verb, sub in _subparsers().items() if any(a.dest == "config" for a in sub._actions))


# what each verb that reads settings needs besides them, in the campaign of ``campaign()``
MINIMAL = {
    "init": [], "settings": [], "rank": ["--dry-run", "--no-chart"], "status": [], "budget": [],
    "stop": ["--reason", "nothing left", "--evidence", "r001"], "lesson": ["r006", "--text", "t", "--dry-run"],
    "candidate": ["new", "--parent", "baseline", "--set", "overlap-grad-reduce", "--lever", "overlap-grad-reduce",
                  "--hypothesis", "h"],
    "launch": ["--baseline"], "poll": ["r001"], "finalize": ["r001"], "teardown": ["r001"], "topology": ["r001"],
    "kube": ["pods", "r001"],
    "gate": ["--run", "r006"], "diagnose": ["r001"], "profile": ["--run", "r001"], "report": [], "doctor": [],
}
# help words of an argument that names a file; those that do but are not read are listed with why
FILE_WORDS = re.compile(r"\b(file|folder|director(y|ies)|log|yaml)\b|\.(ya?ml|json|parquet|pt|md)\b", re.I)
NOT_READ = {("rows", "out"): "an output: the file or folder the verb writes",
            ("rank", "dry_run"): "a switch: RESULTS.md is written, not read",
            ("init", "note"): "text", ("finalize", "hang_after"): "seconds",
            ("rows", "seq_length"): "a number", ("rows", "vocab_size"): "a number",
            ("candidate", "lever"): "a lever id; the catalog it is read from is the candidate-levers case",
            ("candidate", "pod_hook"): "a hook name", ("launch", "pod_hook"): "a hook name",
            ("gate", "run"): "a run id; a run directory's files are the gate-* cases",
            ("kube", "target"): "a run id, or log-pod: objects on the cluster, not files here",
            ("profile", "run"): "a run id; its traces and recipe are the profile-* cases",
            ("verify", "replay"): "a switch: the logs and run directories it reads are the campaign's own, and one "
                                  "that is missing or changed is a replay failure (test_replay.py)"}


def test_every_file_argument_has_a_case():
    covered = {(case.verb, case.arg) for case in CASES} | {(verb, "config") for verb in config_verbs()}
    assert file_arguments() | {(verb, "config") for verb in config_verbs()} == covered
    assert sorted(MINIMAL) == config_verbs(), "a verb that reads settings needs its MINIMAL arguments"
    rows_actions = next(a for a in _subparsers()["rows"]._actions if a.dest == "action").choices
    for action in rows_actions:  # each action of rows reads its own kind of file
        assert any(case.id.startswith("rows-%s" % action) for case in CASES), action
    for verb, sub in _subparsers().items():
        for action in sub._actions:
            if action.metavar in cli.INPUT_METAVARS or action.dest in ("help", "campaign") or action.choices:
                continue
            if FILE_WORDS.search(action.help or ""):
                assert (verb, action.dest) in NOT_READ, \
                    "%s %s speaks of a file: give it an input metavar (%s) and a case, or say why not" % (
                        verb, action.option_strings or action.dest, ", ".join(cli.INPUT_METAVARS))


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    """The valid files of each kind the cases need; the rows and dumps only where the data extra is installed."""
    root = tmp_path_factory.mktemp("valid")
    files = {}
    trace = root / "trace.json"
    trace.write_bytes(trace_text())
    files["trace"] = str(trace)
    try:
        import pyarrow  # noqa: F401
        import transformers  # noqa: F401
        import jinja2  # noqa: F401
    except ImportError:
        return files
    import pyarrow as pa
    import pyarrow.parquet as pq
    from test_rows import records, save_tokenizer, write_jsonl

    from attune.data import rows as rows_mod
    tok = save_tokenizer(root / "tok")
    files["tokenizer"], files["tokenizer_json"] = str(tok), str(tok / "tokenizer.json")
    write_jsonl(root / "records.jsonl", records(5, n=40))
    files["records_jsonl"] = str(root / "records.jsonl")
    pq.write_table(pa.Table.from_pylist([{"prompt": r["messages"][0]["content"], "response": r["messages"][1][
        "content"]} if "messages" in r else {"prompt": r["prompt"], "response": r["response"]} for r in records(6, 40)]),
        root / "records.parquet")
    files["records_parquet"] = str(root / "records.parquet")
    rows_mod.build(root / "records.jsonl", tok, 128, root / "rows.parquet")
    files["rows"] = str(root / "rows.parquet")
    files["rows_ready"] = True
    try:
        import torch
    except ImportError:
        return files
    from test_rollout import make_sample

    from attune.data import rollout
    rng = random.Random(3)
    torch.save({"rollout_id": 0, "samples": [make_sample(rng, 0, i) for i in range(8)]}, root / "0.pt")
    files["dump"] = str(root / "0.pt")
    rollout.from_slime(str(root / "0.pt"), root / "slime_rows.parquet", seq_length=256, vocab_size=1000)
    files["slime_rows"] = str(root / "slime_rows.parquet")
    rollout.to_slime(root / "slime_rows.parquet", root / "dump")
    files["manifest"] = str(root / "dump" / rollout.MANIFEST)
    files["slime_ready"] = True
    return files


def _needs(case, files):
    if "rows" in case.needs and not files.get("rows_ready"):
        pytest.skip("the data extra (pyarrow, transformers, jinja2) is not installed")
    if "slime" in case.needs and not files.get("slime_ready"):
        pytest.skip("torch is not installed")


@pytest.mark.parametrize("case, kind", [pytest.param(case, kind, id="%s-%s" % (case.id, kind))
                                        for case in CASES for kind in case.kinds()])
def test_a_file_argument_refuses_what_it_cannot_read(case, kind, data_files, tmp_path):
    _needs(case, data_files)
    argv, named = case.write(tmp_path, bad(kind, case.valid(data_files), case.wrong(data_files)), data_files)
    result = attune(*argv)
    if kind in case.readable:
        code, why = case.readable[kind]
        assert result[0] == code and "Traceback" not in result[2], (why, result)
    else:
        assert_refused(result, named, kind)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_the_valid_file_of_each_case_is_read(case, data_files, tmp_path):
    _needs(case, data_files)
    argv, _named = case.write(tmp_path, case.valid(data_files), data_files)
    code, _out, err = attune(*argv)
    assert code == 0, err


# ---------------------------------------------------------------------------------------- campaign files
@pytest.fixture
def campaign(tmp_path):
    """A campaign on the local backend whose baseline recipe is a real file; candidates r004 (kept) and r006."""
    baseline = tmp_path / "baseline.yaml"
    baseline.write_bytes(RECIPE)
    b = Builder(tmp_path / "c", make_settings(ATTUNE_BASELINE_YAML=str(baseline), ATTUNE_RUN_PREFIX="alice-x-"),
                campaign_id="alice-x")
    b.baseline(3, 1000.0)
    for run, lever, step in (("r004", "overlap-grad-reduce", 900.0), ("r006", "ddp-bucket-size", 1100.0)):
        b.launch(run, "candidate", run, parent="r001", lever=lever, hypothesis="h")
        b.result(run, step)
    return b.campaign


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("verb", config_verbs())
def test_config_is_read_by_every_verb_that_takes_it(verb, kind, campaign, tmp_path):
    config = tmp_path / "config.env"
    config.write_bytes(bad(kind, CONFIG, REPORT_MD.encode()))
    where = tmp_path / "new" if verb == "init" else campaign.dir
    assert_refused(attune(verb, "--campaign", where, "--config", config, *MINIMAL[verb]), config, kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("verb", config_verbs())
def test_the_frozen_settings_are_refused_by_every_verb_that_reads_them(verb, kind, campaign, tmp_path):
    frozen = campaign.dir / ".attune" / "settings.env"
    frozen.write_bytes(bad(kind, frozen.read_bytes(), REPORT_MD.encode()))
    extra = ["--config", tmp_path / "config.env"] if verb == "init" else []
    (tmp_path / "config.env").write_bytes(CONFIG)
    assert_refused(attune(verb, "--campaign", campaign.dir, *extra, *MINIMAL[verb]), frozen, kind)


def _candidate(campaign):
    code, out, err = attune("candidate", "new", "--campaign", campaign.dir, *MINIMAL["candidate"][1:], "--json")
    assert code == 0, err
    return json.loads(out)["run"]


CAMPAIGN_FILES = {
    # id: (the file, relative to the campaign fixture's tmp_path or a run, the command); the baseline recipe is read
    # from the campaign's frozen copy, whose change is an integrity failure (exit 3)
    "candidate-baseline": (lambda c, run: c.dir / ".attune" / "baseline.yaml", lambda c, run: MINIMAL["candidate"]),
    "candidate-parent": (lambda c, run: c.run_dir(run) / "recipe.yaml",
                         lambda c, run: ["new", "--parent", run, "--set", "manual-gc", "--lever", "manual-gc",
                                         "--hypothesis", "h"]),
    "candidate-levers": (lambda c, run: c.dir / "levers.md", lambda c, run: MINIMAL["candidate"]),
    "launch-baseline": (lambda c, run: c.dir / ".attune" / "baseline.yaml", lambda c, run: ["--baseline"]),
    "launch-recipe": (lambda c, run: c.run_dir(run) / "recipe.yaml", lambda c, run: [run]),
    "launch-record": (lambda c, run: c.run_dir(run) / "candidate.json", lambda c, run: [run]),
    "lesson-levers": (lambda c, run: c.dir / "levers.md", lambda c, run: MINIMAL["lesson"]),
}
CAMPAIGN_WRONG = {"candidate.json": b'{"run": "r004"}\n', "levers.md": RECIPE, "recipe.yaml": LOG,
                  "baseline.yaml": LOG}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(CAMPAIGN_FILES))
def test_the_files_a_campaign_holds_are_refused_when_unreadable(name, kind, campaign):
    where, argv = CAMPAIGN_FILES[name]
    run = _candidate(campaign) if name in ("candidate-parent", "launch-recipe", "launch-record") else None
    path = where(campaign, run)
    valid = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(bad(kind, valid, CAMPAIGN_WRONG[path.name]))
    verb = name.split("-")[0]
    assert_refused(attune(verb, "--campaign", campaign.dir, *argv(campaign, run)), path, kind,
                   3 if name.endswith("-baseline") else 2)
