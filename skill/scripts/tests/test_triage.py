"""Failure triage on real failure logs (tests/data/logs) and on Kubernetes event texts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import DATA, REPO

from attune.core import logparse, triage

LOGS = DATA / "logs"


def classify_file(path, **kwargs):
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    return triage.classify(logparse.parse_file(path), log_lines=lines, **kwargs)


# (log, exit code, class, evidence line, memory): real failure texts (tests/data/logs/SOURCES.md), one or more
# per class and per way a stack reports it
REAL = [
    ("C_failures/mlm92_oom_old_format.log", 1, "oom", 9, "gpu"),  # torch, old text
    ("C_failures/tau2_monitor_slime_cuda_oom.log", 1, "oom", 2, "gpu"),  # torch.OutOfMemoryError, new text
    ("C_failures/slime1767_ray_task_error_oom.log", 1, "oom", 15, "gpu"),  # wrapped by Ray
    ("C_failures/nccl1235_nccl_cuda_failure_oom.log", 1, "oom", 14, "gpu"),  # inside NCCL
    ("C_failures/dsexamples323_cublas_alloc_failed.log", 1, "oom", 16, "gpu"),  # inside cuBLAS
    ("C_failures/easyr1_185_raylet_oom.log", 1, "oom", 1, "host"),  # Ray's memory monitor, the raylet
    ("C_failures/flingbot11_ray_oom_exception.log", 1, "oom", 10, "host"),  # ray.exceptions.OutOfMemoryError
    ("C_failures/slime1845_raylet_oom_checkpoint.log", 1, "oom", 2, "host"),
    ("C_failures/kuberay4287_head_oomkilled.log", 1, "oom", 5, "host"),  # the container's limit
    ("C_failures/fang1_default_cpu_allocator.log", 1, "oom", 1, "host"),  # torch's CPU allocator
    ("C_failures/ert7797_dmesg_oom_killer.log", 1, "oom", 1, "host"),  # the Linux OOM killer
    ("C_failures/arjuna52_shell_killed.log", 137, "oom", 5, "host"),  # a bare Killed and SIGKILL's exit code
    ("C_failures/arjuna52_slurm_oom_kill_event.log", 1, "oom", 2, "host"),
    ("C_failures/ray14394_tune_error_after_slurm_oom_kill.log", 1, "oom", 6, "host"),  # cause after consequence
    ("C_failures/mlm935_nccl_watchdog_distbackenderror.log", 1, "nccl_timeout", 2, None),
    ("C_failures/verl7040_cuda_device_max_connections.log", 1, "config_error", 1, None),
    ("C_failures/gbs_assert_quoted_in_notes.log", 1, "config_error", 1, None),
    ("C_failures/nemo11480_parallel_state_runtimeerror.log", 1, "config_error", 3, None),  # RuntimeError
    ("C_failures/swift8219_num_query_groups_valueerror.log", 1, "config_error", 1, None),  # ValueError
    ("C_failures/slime1486_validate_args_should_be_divisible.log", 1, "config_error", 4, None),  # "should be"
    ("C_failures/bionemo784_num_layers_should_be_divisible.log", 1, "config_error", 3, None),
    ("A_iteration/megds396_gradnorm_nan.log", 1, "nan_loss", 1, None),
]


@pytest.mark.parametrize("name, exit_code, cls, line_no, memory", REAL)
def test_real_failures_are_classed_with_their_evidence_line(name, exit_code, cls, line_no, memory):
    path = LOGS / name
    found = classify_file(path, exit_code=exit_code)
    assert found is not None and found.cls == cls, found
    assert found.line_no == line_no
    assert found.evidence == path.read_text().split("\n")[line_no - 1].strip()
    assert found.memory == memory
    assert (found.meaning, found.next_step) == (triage.MEMORY[memory] if cls == "oom" else triage.CLASSES[cls])


def test_every_class_has_a_real_case():
    assert {case[2] for case in REAL} | {"submit_failed", "unschedulable", "image_pull", "hang", "crash"} == \
        set(triage.CLASSES)
    assert {case[4] for case in REAL if case[2] == "oom"} == set(triage.MEMORY)


def test_a_clean_log_is_no_failure_and_an_exit_code_alone_is_a_crash():
    path = LOGS / "A_iteration" / "epfl11_slow.log"
    assert classify_file(path) is None
    assert classify_file(path, exit_code=0) is None
    found = classify_file(path, exit_code=139)
    assert found.cls == "crash" and found.source == "exit_code"


def test_fp16_skipped_iterations_are_not_nan_loss():
    assert classify_file(LOGS / "A_iteration" / "mlm602_fp16_skipped.log") is None


def test_events_come_first():
    log = LOGS / "C_failures" / "mlm92_oom_old_format.log"
    # Kubernetes event messages in the form `kubectl get events` prints them
    unschedulable = "Warning  FailedScheduling  pod/x  0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    pull = "Warning  Failed  pod/x  Failed to pull image \"registry.example/megatron:bad\": not found"
    assert classify_file(log, events=[pull, unschedulable]).cls == "unschedulable"
    assert classify_file(log, events=[pull]).cls == "image_pull"
    assert classify_file(log, events=["Normal  Pulled  pod/x  Successfully pulled image"]).cls == "oom"


def test_hang_needs_the_limit_to_pass():
    path = LOGS / "A_iteration" / "epfl11_slow.log"
    assert classify_file(path, seconds_without_progress=100, hang_after_s=900) is None
    found = classify_file(path, seconds_without_progress=1200, hang_after_s=900)
    assert found.cls == "hang" and "after iteration 185" in found.evidence


def test_every_class_is_documented():
    text = (REPO / "skill" / "references" / "failure_triage.md").read_text()
    documented = re.findall(r"^## `(\w+)`", text, re.M)
    assert documented == list(triage.CLASSES)


ITERATION = (" [2026-11-02 09:00:{sec:02d}] iteration {it:8d}/      20 | consumed samples: {cs:12d} | elapsed time per "
             "iteration (ms): 3400.0 | learning rate: 3.000000E-04 | global batch size:   128 | lm loss: 9.0E+00 | "
             "loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |")


def completed_log(extra=()):
    """A run that logged all 20 of its iterations, then ``extra`` lines."""
    return [ITERATION.format(sec=i, it=i, cs=128 * i) for i in range(1, 21)] + list(extra)


def classify_lines(lines, **kwargs):
    return triage.classify(logparse.parse_lines(line + "\n" for line in lines), log_lines=lines, **kwargs)


def test_an_oomkilled_event_is_the_cause_of_a_logged_nccl_timeout():
    log = LOGS / "C_failures" / "mlm935_nccl_watchdog_distbackenderror.log"
    event = "Warning  OOMKilled  pod/x-worker-3  Container ray-worker was OOMKilled"
    found = classify_file(log, exit_code=1, events=["Normal  Pulled  pod/x  Successfully pulled image", event])
    assert (found.cls, found.source, found.evidence) == ("oom", "events", event)
    assert classify_file(log, exit_code=1).cls == "nccl_timeout"


@pytest.mark.parametrize("line", [
    "pretrain_gpt.py: error: unrecognized arguments: --foo",
    "[rank0]: pretrain_gpt.py: error: argument --num-layers: invalid int value: 'x'",
])
def test_an_argparse_error_is_a_config_error(line):
    lines = ["usage: pretrain_gpt.py [-h] [--num-layers NUM_LAYERS] ...", line]
    found = classify_lines(lines, exit_code=2)
    assert (found.cls, found.line_no, found.evidence) == ("config_error", 2, line.strip())


def test_events_do_not_fail_a_run_that_exited_0_with_its_iterations():
    transient = ["Warning  FailedScheduling  pod/x-head  0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
                 "Warning  Failed  pod/x-worker  Failed to pull image \"registry.example/megatron:1\": timeout",
                 "Warning  OOMKilled  pod/x-old  Container was OOMKilled"]
    assert classify_lines(completed_log(), exit_code=0, events=transient) is None
    assert classify_lines(completed_log(), exit_code=1, events=transient).cls == "unschedulable"
    assert classify_lines([], exit_code=0, events=transient).cls == "unschedulable"  # nothing ran


def test_pod_hook_lines_are_never_failure_evidence():
    from attune.pod_hooks.helper_status import PREFIX
    hook_lines = ["%s profiler failed: RuntimeError: no trace written" % PREFIX,
                  "%s oom_snapshot failed: AssertionError: must be set" % PREFIX,
                  "%s memory warning: torch.OutOfMemoryError: CUDA out of memory (a hook's own)" % PREFIX,
                  "%s nccl_debug failed: ProcessGroupNCCL Timeout reading a file" % PREFIX]
    assert classify_lines(completed_log(hook_lines), exit_code=0) is None
    assert logparse.parse_lines(line + "\n" for line in hook_lines)["failures"] == []
    # the run's own error lines still count, and a hook's line never stands in for the exit code
    assert classify_lines(completed_log(hook_lines), exit_code=1).source == "exit_code"
    assert classify_lines(completed_log(["RuntimeError: boom"] + hook_lines), exit_code=1).evidence == \
        "RuntimeError: boom"


def test_exit_0_after_the_last_iteration_is_finished_whatever_prints_after_it():
    shutdown = ["[exiting program at iteration 20]", "Exception ignored in: <function Pool.__del__ at 0x7f>",
                "Traceback (most recent call last):", "TypeError: 'NoneType' object is not callable"]
    assert classify_lines(completed_log(shutdown), exit_code=0) is None
    # the same lines after 15 of 20 iterations, or with a failed exit, are still a crash
    assert classify_lines(completed_log()[:15] + shutdown, exit_code=0).cls == "crash"
    assert classify_lines(completed_log(shutdown), exit_code=1).evidence == shutdown[-1]


def test_a_bare_killed_is_host_memory_only_with_a_sigkill_exit():
    path = LOGS / "C_failures" / "arjuna52_shell_killed.log"
    for code in (137, -9):
        assert (classify_file(path, exit_code=code).cls, classify_file(path, exit_code=code).memory) == ("oom", "host")
    for code in (1, None):  # killed, but nothing says by the kernel for memory
        assert classify_file(path, exit_code=code) is None or classify_file(path, exit_code=code).cls == "crash"


def test_an_oomkilled_event_is_host_memory():
    log = LOGS / "C_failures" / "mlm935_nccl_watchdog_distbackenderror.log"
    found = classify_file(log, exit_code=1, events=["Warning  OOMKilled  pod/x-worker-3  Container was OOMKilled"])
    assert (found.cls, found.memory, found.next_step) == ("oom", "host", triage.MEMORY["host"][1])


def test_the_local_backends_memory_limit_is_host_memory():
    from attune.campaign.localrun import MARK
    line = ("%sout of memory: the job's processes hold 8123 MiB, over the 8000 MiB a local run may hold "
            "(ATTUNE_LOCAL_MEMORY_MB); killing them" % MARK)
    found = classify_lines(completed_log()[:8] + [line], exit_code=-9)
    assert (found.cls, found.memory, found.line_no) == ("oom", "host", 9)


@pytest.mark.parametrize("recovered", [
    # real texts (tests/data/logs/SOURCES.md) printed by a run that went on to finish
    "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
    "(MegatronTrainRayActor pid=10310) [torch_memory_saver.cpp] TorchMemorySaver::malloc return OOM since "
    "memory_margin_bytes=1073741824",
    "  empty_unused_memory_level ....................... 0  # a config print: no failure at all",
])
def test_a_memory_line_in_a_run_that_finished_is_no_failure(recovered):
    assert classify_lines(completed_log()[:10] + [recovered] + completed_log()[10:], exit_code=0) is None
    # the same line in a run that did not finish is its cause
    if "empty_unused" not in recovered:
        found = classify_lines(completed_log()[:10] + [recovered], exit_code=1)
        assert (found.cls, found.memory, found.line_no) == ("oom", "gpu", 11)


def test_a_gpu_oom_printed_after_an_nccl_timeout_is_its_consequence():
    # NVIDIA/nccl#1284: a broadcast timed out after 1800 s and an "OutOfMemoryError ... Tried to allocate more than
    # 1EB" followed; the maintainer: the timeout is the one to focus on
    timeout = LOGS / "C_failures" / "mlm935_nccl_watchdog_distbackenderror.log"
    lines = timeout.read_text().split("\n")
    oom = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory."
    assert classify_lines(lines + [oom], exit_code=1).cls == "nccl_timeout"
    found = classify_lines([oom] + lines, exit_code=1)  # an OOM first makes the others time out
    assert (found.cls, found.line_no) == ("oom", 1)


def test_only_the_last_run_of_a_restarted_log_counts():
    first = completed_log()[:5] + ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    second = completed_log()[:7] + ["Traceback (most recent call last):", "RuntimeError: NCCL error: remote process exited"]
    found = classify_lines(first + second, exit_code=1)
    assert (found.cls, found.line_no) == ("crash", len(first + second))


def test_a_bare_assertion_from_validation_code_is_a_config_error_shown_by_its_assert():
    # slime PR #1486's traceback with the assert's message taken away: the code path alone decides
    lines = (LOGS / "C_failures" / "slime1486_validate_args_should_be_divisible.log").read_text().split("\n")[:3]
    found = classify_lines(lines + ["[rank14]: AssertionError"], exit_code=1)
    assert (found.cls, found.line_no, found.evidence) == ("config_error", 2, lines[1].strip())


def test_an_exception_through_validation_code_is_a_config_error_whatever_its_type_and_words():
    frame = '[rank0]:   File "/opt/megatron-lm/megatron/core/transformer/transformer_config.py", line 640, in __post_init__'
    for error in ("[rank0]: ValueError: Invalid recompute configuration", "[rank0]: KeyError: 'moe_router_dtype'",
                  "[rank0]: NotImplementedError: fp8 with this recipe", "[rank0]: TypeError: bad value"):
        found = classify_lines(["[rank0]: Traceback (most recent call last):", frame, "[rank0]:     raise X(...)", error],
                               exit_code=1)
        assert (found.cls, found.line_no) == ("config_error", 4), error
    # a broken program or environment is not a configuration, wherever it is raised
    found = classify_lines([frame, "[rank0]: ModuleNotFoundError: No module named 'transformer_engine'"], exit_code=1)
    assert found.cls == "crash"


def test_a_mid_training_exception_that_names_a_parallel_size_is_a_crash():
    line = "RuntimeError: the tensor parallel group must be rebuilt after the failure"
    assert classify_lines(completed_log()[:7] + [line], exit_code=1).cls == "crash"
    assert classify_lines([line], exit_code=1).cls == "config_error"  # at start-up it is validation


def test_the_backends_message_is_read_when_the_log_shows_nothing():
    message = ("Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
               + (LOGS / "C_failures" / "flingbot11_ray_oom_exception.log").read_text())
    found = classify_lines(completed_log()[:3], exit_code=1, backend_message=message)
    assert (found.cls, found.memory, found.source, found.line_no) == ("oom", "host", "backend", None)
    assert found.evidence.startswith("ray.exceptions.OutOfMemoryError: Task was killed")
    assert classify_lines(completed_log(), exit_code=0, backend_message=message) is None


# The lever catalog, the settings and the recipe fields the advice may name (a backticked span that is a lever id,
# a flag or env var of one, an ATTUNE_ setting, or a Kubernetes field of the recipe's pod templates).
RECIPE_FIELDS = {"resources.limits.memory"}
GPU_ONLY = {"selective-recompute", "full-recompute", "micro-batch-size", "expandable-segments", "sglang-mem-fraction"}


def _advice():
    return [("class " + name, next_step) for name, (_meaning, next_step) in triage.CLASSES.items()] + [
        ("memory " + name, next_step) for name, (_meaning, next_step) in triage.MEMORY.items()]


def _resolve(name, entries):
    """The catalog entry a backticked name belongs to, "setting" or "recipe", or None."""
    from attune.core import settings
    for entry in entries:
        if name == entry["id"] or name in entry["flags"] or name in entry["env"]:
            return entry
    if name in settings.SPEC_BY_ENV:
        return "setting"
    return "recipe" if name in RECIPE_FIELDS else None


def test_every_class_advice_names_only_catalog_levers_settings_or_recipe_fields():
    from attune.core import levers
    entries = levers.parse(levers.CATALOG.read_text())
    for where, text in _advice():
        named = set(re.findall(r"`([^`]+)`", text))
        named |= set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*|ATTUNE_[A-Z0-9_]+)", text))  # backticked or not
        for name in named:
            assert _resolve(name, entries) is not None, (where, name)
    recipe = (DATA / "recipes" / "megatron_rayjob.yaml").read_text()
    assert "resources:" in recipe and "limits:" in recipe  # the field the host advice names exists in a recipe


def test_host_memory_advice_names_only_levers_that_hold_host_memory():
    from attune.core import levers
    entries = levers.parse(levers.CATALOG.read_text())
    named = [_resolve(name, entries) for name in re.findall(r"`([^`]+)`", triage.MEMORY["host"][1])]
    lever_entries = [entry for entry in named if isinstance(entry, dict)]
    assert lever_entries and "setting" in named and "recipe" in named
    for entry in lever_entries:
        assert entry["id"] not in GPU_ONLY, entry["id"]
        assert "host" in (entry["Memory"] + entry["Pitfalls"]).lower(), entry["id"]
    gpu = {entry["id"] for entry in (_resolve(n, entries) for n in re.findall(r"`([^`]+)`", triage.MEMORY["gpu"][1]))
           if isinstance(entry, dict)}
    assert gpu and gpu <= GPU_ONLY | {"activation-offload"}


# Held-out and corpus logs: every C_failures log with an expected.json, in the project's test data and in the corpus
# (ATTUNE_CORPUS_DIR, default ../shared/data, when present), is classed as its first record's kind says.
CORPUS = Path(os.environ.get("ATTUNE_CORPUS_DIR") or REPO.parent / "shared" / "data")
KIND_CLASS = {"oom": ("oom", "gpu"), "ray_oom": ("oom", "host"), "oomkilled": ("oom", "host"),
              "host_oom": ("oom", "host"), "killed": ("oom", "host"), "nccl_timeout": ("nccl_timeout", None), "argparse": ("config_error", None)}


def _failure_logs():
    found = []
    for where, root in (("project", LOGS), ("corpus", CORPUS / "logs")):
        for expected in sorted((root / "C_failures").glob("*.expected.json")):
            found.append(pytest.param(expected, id="%s:%s" % (where, expected.name.split(".")[0])))
    return found


@pytest.mark.parametrize("expected", _failure_logs())
def test_failure_logs_are_classed_as_their_expected_kind(expected):
    records = sorted(json.loads(expected.read_text()), key=lambda record: record["line_no"])
    log = expected.with_name(expected.name.replace(".expected.json", ".log"))
    found = classify_file(log, exit_code=137 if records[0]["kind"] == "killed" else 1)
    kinds = [record["kind"] for record in records]
    memory_kinds = [kind for kind in kinds if kind in KIND_CLASS and KIND_CLASS[kind][0] == "oom"]
    if memory_kinds:
        assert (found.cls, found.memory) == KIND_CLASS[memory_kinds[0]], found
    elif kinds[0] in KIND_CLASS:
        assert found.cls == KIND_CLASS[kinds[0]][0], found
    else:  # an assertion or another exception: a refused configuration, or a crash
        assert found.cls in ("config_error", "crash"), found


def test_an_nccl_failure_inside_model_parallel_initialization_is_not_a_config_error():
    # the frame of nemo11480_parallel_state_runtimeerror.log with the error of pytorch/pytorch#111187's title
    frame = (LOGS / "C_failures" / "nemo11480_parallel_state_runtimeerror.log").read_text().split("\n")[0]
    error = ("[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
             "ProcessGroupNCCL.cpp:1331, unhandled cuda error (run with NCCL_DEBUG=INFO for details)")
    assert classify_lines([frame, error], exit_code=1).cls == "crash"


def test_transformer_engines_allocation_errors_are_gpu_memory():
    # the texts of TE's NVTE_CHECK_CUDA and NVTE_CHECK_CUBLAS ("CUDA Error: " + cudaGetErrorString, whose text for
    # cudaErrorMemoryAllocation is "out of memory"; "CUBLAS Error: " + cublasGetStatusString) after a TE location
    for text in ("CUDA Error: out of memory", "CUBLAS Error: the resource allocation failed"):
        line = "RuntimeError: /TransformerEngine/transformer_engine/common/gemm/cublaslt_gemm.cu:300 in function " \
               "cublas_gemm: " + text
        found = classify_lines(["Traceback (most recent call last):", line], exit_code=1)
        assert (found.cls, found.memory, found.line_no) == ("oom", "gpu", 2), text


@pytest.mark.parametrize("line, memory", [
    # SGLang's model runner (slime's rollout engine), raised when the KV cache gets no GPU memory
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "gpu"),
    ("RuntimeError: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY", "gpu"),  # synthetic: the driver API's name
    # older Ray's memory monitor (ray-project/ray PR #3323), and an actor the monitor killed
    ("ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node", "host"),
    # NCCL's include/alloc.h warnings (WARN("Failed to CUDA host alloc %ld bytes", ...)): pinned host memory
    ("n1:1:2 [0] include/alloc.h:99 NCCL WARN Failed to CUDA host alloc 4194304 bytes", "host"),
    ("n1:1:2 [0] include/alloc.h:185 NCCL WARN Failed to CUDA malloc 6291456 bytes", "gpu"),
    ("The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY", "host"),
])
def test_more_ways_to_run_out_of_memory(line, memory):
    found = classify_lines(["Traceback (most recent call last):", line], exit_code=1)
    assert (found.cls, found.memory, found.line_no) == ("oom", memory, 2)


def test_a_slime_run_is_past_start_up_at_its_first_step_record():
    # a real slime step record (tests/data/logs/D_slime/slime1136_step_rayprefix.log), then an error that names
    # a constraint: mid-training, not a configuration rule
    step = next(line for line in (LOGS / "D_slime" / "slime1136_step_rayprefix.log").read_text().split("\n")
                if " - step " in line)
    error = "(MegatronTrainRayActor pid=32167) RuntimeError: invalid value in the rollout batch"
    assert classify_lines([step, error], exit_code=1).cls == "crash"
    assert classify_lines([error], exit_code=1).cls == "config_error"


def test_a_bare_assertion_after_a_multi_line_asserts_condition_is_a_config_error():
    # bionemo784_num_layers_should_be_divisible.log with the assert's message taken away: the condition line says it
    lines = (LOGS / "C_failures" / "bionemo784_num_layers_should_be_divisible.log").read_text().split("\n")[:2]
    found = classify_lines(lines + ["15: [rank15]: AssertionError"], exit_code=1)
    assert (found.cls, found.line_no, found.evidence) == ("config_error", 2, lines[1].strip())


def test_a_start_up_formula_on_parallel_sizes_is_a_config_error():
    line = "AssertionError: num_layers_per_virtual_pipeline_stage (3) * pipeline_model_parallel_size (4) != num_layers (10)"
    assert classify_lines([line], exit_code=1).cls == "config_error"
