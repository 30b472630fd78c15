"""Every place the skill's code starts a program, imports a module by name, changes an import path or deserializes
a file, reviewed: the verbs run outside the agent's sandbox, so each of these must take what it runs only from the
campaign's frozen, recorded copies, or be refused under a campaign (issue: nothing the agent can write is ever
executed, imported or followed by a verb). A new such place fails this test until it is reviewed and listed here
with the reason it is safe."""

from __future__ import annotations

import re

from conftest import SCRIPTS

KINDS = {
    "starts a program": r"subprocess\.(run|Popen|call|check_output|check_call)\(|os\.system\(|os\.exec\w*\(",
    "imports by name": r"importlib\.import_module\(|__import__\(|runpy\.run_\w+\(",
    "changes an import path": r"sys\.path\.(insert|append)\(|\[\"PYTHONPATH\"\]\s*=",
    "deserializes": r"pickle\.loads?\(|torch\.load\(|yaml\.load\(|from_pretrained\(",
}
# (file under skill/scripts, kind): why what it runs, imports or reads is not the agent's
REVIEWED = {
    ("__init__.py", "imports by name"): "the package's lazy attributes: module names that are constants of the skill",
    ("campaign/backends.py", "starts a program"): "localrun.py of the skill copy the verb runs from, with this "
                                                   "interpreter",
    ("campaign/localrun.py", "starts a program"): "the run's command inside its own bubblewrap sandbox (the recipe "
                                                   "was checked against the frozen baseline at launch, "
                                                   "core/envpolicy.py), and a trial `true` in the same sandbox",
    ("campaign/doctor.py", "starts a program"): "the agent CLI the frozen settings name (ATTUNE_CLAUDE_BIN), "
                                                 "found on the PATH the campaign's wrapper froze",
    ("campaign/preship.py", "imports by name"): "PLUGIN_MODULES, a constant of the skill",
    ("campaign/background.py", "deserializes"): "pipes between this process and the child it forked, never a file",
    ("core/confinement.py", "starts a program"): "the doctor's trial of bwrap, found on the frozen PATH",
    ("correctness/rules.py", "deserializes"): "YAML's safe loader (CSafeLoader or SafeLoader)",
    ("correctness/inventory.py", "starts a program"): "`gate --coverage`, a developer option: refused under a "
                                                       "campaign's wrapper (cli DEVELOPER_OPTIONS)",
    ("correctness/inventory.py", "changes an import path"): "the same developer option, in its child process",
    ("data/tokenize.py", "imports by name"): "transformers and tokenizers, by constant name",
    ("data/tokenize.py", "deserializes"): "AutoTokenizer.from_pretrained with local_files_only and without "
                                          "trust_remote_code: a tokenizer folder that names code of its own is refused",
    ("data/rollout.py", "deserializes"): "torch.load(weights_only=True), else a loader that builds plain values only",
    ("data/megatron.py", "changes an import path"): "runs in the training job (a pod, or a confined local run), "
                                                    "never in a verb",
    ("data/megatron.py", "imports by name"): "runs in the training job, never in a verb",
    ("planner/agent.py", "changes an import path"): "the planner agent, run by the launcher from the skill copy: "
                                                    "the skill's own folder",
    ("planner/space.py", "changes an import path"): "the planner agent: the skill's own folder",
    ("planner/verbs.py", "starts a program"): "the planner agent runs the verbs of the skill copy with this "
                                              "interpreter",
    ("pod_hooks/wrap.py", "changes an import path"): "runs in the training job: the skill's own folder",
    ("pod_hooks/wrap.py", "starts a program"): "runs in the training job: the job's own command",
    ("pod_hooks/hooks.py", "starts a program"): "runs in the training job: nvidia-smi",
    ("pod_hooks/hooks.py", "changes an import path"): "runs in the training job: the hooks' package last on the "
                                                      "job's own PYTHONPATH",
    ("pod_hooks/cpu.py", "imports by name"): "runs in the training job: the job's own training script",
    ("simulate/sim_megatron.py", "changes an import path"): "the SIMULATED workload, a run's program: the skill's "
                                                            "own folder",
    ("simulate/sim_slime.py", "changes an import path"): "the SIMULATED workload: the skill's own folder",
    ("simulate/fit_golden.py", "changes an import path"): "a maintainer's fitting tool: the skill's own folder",
}


def _found() -> set:
    out = set()
    for path in sorted(SCRIPTS.rglob("*.py")):
        rel = path.relative_to(SCRIPTS).as_posix()
        if "/tests/" in "/" + rel or rel.startswith("tests/"):
            continue
        code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                         if not line.lstrip().startswith("#"))
        for kind, pattern in KINDS.items():
            if re.search(pattern, code):
                out.add((rel, kind))
    return out


def test_every_place_that_runs_imports_or_deserializes_is_reviewed():
    found = _found()
    new = sorted(found - set(REVIEWED))
    gone = sorted(set(REVIEWED) - found)
    assert not new, ("not reviewed (say in REVIEWED why what it runs, imports or reads is never the agent's): %s"
                     % new)
    assert not gone, "listed but no longer there (remove them from REVIEWED): %s" % gone


def test_the_scan_finds_what_it_looks_for():
    samples = {"starts a program": "subprocess.run(['x'])", "imports by name": "importlib.import_module(name)",
               "changes an import path": "sys.path.insert(0, p)", "deserializes": "pickle.load(handle)"}
    for kind, line in samples.items():
        assert re.search(KINDS[kind], line), kind
        assert not re.search(KINDS[kind], "# " + line.replace("(", " ")), kind
