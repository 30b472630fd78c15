"""The text Megatron-LM, PyTorch and NCCL print, in their real formats, for the simulated workload.

Formats follow the project's reference on Megatron-LM logs (iteration line and memory report from
``training_log`` / ``report_memory`` at core_v0.16 and later: microsecond timestamps, ``{:.2f}``
memory), PyTorch's CUDA caching allocator message and ProcessGroupNCCL's watchdog. Every function
returns lines without the ``SIMULATED`` label; the program adds it. The file paths and line numbers
inside the tracebacks stand for Megatron-LM's and PyTorch's, as a reader of a real log expects
them; they are not taken from one exact version.
"""

from __future__ import annotations

import datetime as dt
from typing import Optional

MEGATRON = "/workspace/Megatron-LM"
TORCH = "/usr/local/lib/python3.12/dist-packages/torch"


def timestamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def datetime_line(what: str, moment: dt.datetime) -> str:
    return "[%s] datetime: %s " % (what, moment.strftime("%Y-%m-%d %H:%M:%S"))


def iteration_line(moment: dt.datetime, iteration: int, train_iters: int, consumed: int, elapsed_ms: str,
                   tflops: Optional[str], lr: str, gbs: int, loss: str, loss_scale: str) -> str:
    """One ``training_log`` line; the numbers come in already formatted (the caller keeps what it printed)."""
    line = " [%s] iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration (ms): %s |" % (
        timestamp(moment), iteration, train_iters, consumed, elapsed_ms)
    if tflops is not None:
        line += " throughput per GPU (TFLOP/s/GPU): %s |" % tflops
    line += " learning rate: %s | global batch size: %5d | lm loss: %s | loss scale: %s |" % (lr, gbs, loss, loss_scale)
    line += " number of skipped iterations: %3d | number of nan iterations: %3d |" % (0, 0)
    return line


def memory_line(rank: int, after: int, values: dict) -> str:
    return ("[Rank %d] (after %d iterations) memory (MB) | allocated: %s | max allocated: %s | reserved: %s | "
            "max reserved: %s" % (rank, after, values["allocated_mb"], values["max_allocated_mb"],
                                  values["reserved_mb"], values["max_reserved_mb"]))


def theoretical_memory_line(weight_and_optimizer_mb: float, activation_mb: float) -> str:
    return ("Theoretical memory footprints: weight and optimizer=%.2f MB, activation=%.2f MB, total=%.2f MB"
            % (weight_and_optimizer_mb, activation_mb, weight_and_optimizer_mb + activation_mb))


def world_size_line(world: int, layout: dict) -> str:
    return ("using world size: %d, data-parallel size: %s, context-parallel size: %s, hierarchical context-parallel "
            "sizes: None, tensor-model-parallel size: %s, pipeline-model-parallel size: %s"
            % (world, layout.get("dp"), layout.get("cp", 1), layout.get("tp"), layout.get("pp")))


def _frames(frames: list) -> list:
    out = ["Traceback (most recent call last):"]
    for path, number, function, code in frames:
        out.append('  File "%s", line %d, in %s' % (path, number, function))
        out.append("    " + code)
    return out


_TRAIN_FRAMES = [
    (MEGATRON + "/pretrain_gpt.py", 333, "<module>", "pretrain("),
    (MEGATRON + "/megatron/training/training.py", 781, "pretrain",
     "iteration, num_floating_point_operations_so_far = train("),
    (MEGATRON + "/megatron/training/training.py", 2303, "train", ") = train_step("),
    (MEGATRON + "/megatron/training/training.py", 1375, "train_step", "losses_reduced = forward_backward_func("),
]


def schedule(layout: dict) -> str:
    """The pipeline schedule function Megatron-LM picks for a layout (``get_forward_backward_func``)."""
    if int(layout.get("pp") or 1) == 1:
        return "forward_backward_no_pipelining"
    if int(layout.get("vp") or 1) > 1:
        return "forward_backward_pipelining_with_interleaving"
    return "forward_backward_pipelining_without_interleaving"


def oom_lines(tried_gib: float, capacity_gib: float, free_gib: float, in_use_gib: float, allocated_gib: float,
              unallocated_gib: float, layout: dict) -> list:
    """The traceback of a CUDA out-of-memory error in the first forward pass (PyTorch >= 2.4 text)."""
    frames = _TRAIN_FRAMES + [
        (MEGATRON + "/megatron/core/pipeline_parallel/schedules.py", 2056, schedule(layout),
         "output_tensor, num_tokens = forward_step("),
        (MEGATRON + "/megatron/core/pipeline_parallel/schedules.py", 420, "forward_step",
         "output_tensor, loss_func = forward_step_func(data_iterator, model)"),
        (MEGATRON + "/pretrain_gpt.py", 262, "forward_step",
         "output_tensor = model(tokens, position_ids, attention_mask, labels=labels, loss_mask=loss_mask)"),
        (MEGATRON + "/megatron/core/models/gpt/gpt_model.py", 571, "forward",
         "loss = self.compute_language_model_loss(labels, logits)"),
        (MEGATRON + "/megatron/core/tensor_parallel/cross_entropy.py", 233, "vocab_parallel_cross_entropy",
         "return _VocabParallelCrossEntropy.apply(vocab_parallel_logits, target, label_smoothing)"),
    ]
    return _frames(frames) + [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of %.2f "
        "GiB of which %.2f GiB is free. Including non-PyTorch memory, this process has %.2f GiB memory in use. Of the "
        "allocated memory %.2f GiB is allocated by PyTorch, and %.2f GiB is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
        "avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        % (tried_gib, capacity_gib, free_gib, in_use_gib, allocated_gib, unallocated_gib)]


def nccl_timeout_lines(rank: int, moment: dt.datetime, seq: int, op: str, numel: int, timeout_ms: int,
                       ran_ms: int) -> list:
    """ProcessGroupNCCL's watchdog taking the process down after a collective timed out."""
    glog = "[rank%d]:[E%s ProcessGroupNCCL.cpp:%%d] " % (rank, moment.strftime("%m%d %H:%M:%S.%f") + "000")
    work = "WorkNCCL(SeqNum=%d, OpType=%s, NumelIn=%d, NumelOut=%d, Timeout(ms)=%d)" % (seq, op, numel, numel,
                                                                                       timeout_ms)
    caught = "[Rank %d] Watchdog caught collective operation timeout: %s ran for %d milliseconds before timing out." % (
        rank, work, ran_ms)
    return [
        glog % 632 + caught,
        glog % 2271 + "[Rank %d] Exception (either an error or timeout) detected by watchdog at work: %d, last "
        "enqueued NCCL work: %d, last completed NCCL work: %d." % (rank, seq, seq + 1, seq - 1),
        glog % 670 + "[Rank %d] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA "
        "kernels, subsequent GPU operations might run on corrupted/incomplete data." % rank,
        glog % 676 + "[Rank %d] To avoid data inconsistency, we are taking the entire process down." % rank,
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank %d] Process group watchdog thread terminated with exception: "
        % rank + caught,
        "Exception raised from checkTimeout at /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
        "634 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f3a2b96c46d in %s/lib/libc10.so)"
        % TORCH,
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        "std::ratio<1l, 1000l> > >) + 0x232 (0x7f39d4a6b4e2 in %s/lib/libtorch_cuda.so)" % TORCH,
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f39d4a72d43 in %s/lib/libtorch_cuda.so)"
        % TORCH,
        "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d (0x7f39d4a7446d in %s/lib/libtorch_cuda.so)"
        % TORCH,
    ]


def crash_lines(layout: dict) -> list:
    """A Python traceback for an illegal memory access in the backward pass."""
    frames = _TRAIN_FRAMES + [
        (MEGATRON + "/megatron/core/pipeline_parallel/schedules.py", 2120, schedule(layout),
         "input_tensor_grad = backward_step("),
        (MEGATRON + "/megatron/core/pipeline_parallel/schedules.py", 481, "backward_step",
         "custom_backward(output_tensor[0], output_tensor_grad[0])"),
        (MEGATRON + "/megatron/core/pipeline_parallel/schedules.py", 177, "custom_backward",
         "Variable._execution_engine.run_backward("),
    ]
    return _frames(frames) + [
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
        "be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ]


def assertion_lines(message: str) -> list:
    """How Megatron-LM's argument validation fails: an ``assert`` in ``validate_args``."""
    frames = [
        (MEGATRON + "/pretrain_gpt.py", 333, "<module>", "pretrain("),
        (MEGATRON + "/megatron/training/training.py", 641, "pretrain", "initialize_megatron("),
        (MEGATRON + "/megatron/training/initialize.py", 88, "initialize_megatron",
         "validate_args(args, args_defaults)"),
        (MEGATRON + "/megatron/training/arguments.py", 402, "validate_args", "assert ("),
    ]
    return _frames(frames) + ["AssertionError: " + " ".join(message.split())]


CUDA_CONNECTIONS = ("Using tensor model parallelism or context parallelism require setting the environment variable "
                    "CUDA_DEVICE_MAX_CONNECTIONS to 1")
