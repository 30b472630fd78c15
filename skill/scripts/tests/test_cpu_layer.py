"""The ``cpu`` pod hook and its start-up layer (``pod_hooks/cpu.py``), around a small training script that makes
the CUDA calls Megatron-LM makes, on this host's CPU-only torch; and how logs and outputs mark such a run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import SCRIPTS

from attune.core import logparse

WRAP = SCRIPTS / "pod_hooks" / "wrap.py"
TORCH = importlib.util.find_spec("torch") is not None

SCRIPT = textwrap.dedent('''\
    import json, os, sys
    import torch
    import helper_beside_the_script  # the script's own folder is first on sys.path, as with python3 script.py
    x = torch.empty(4, device="cuda")
    y = torch.ones(2, device=torch.cuda.current_device())
    z = torch.zeros(3).cuda()
    w = torch.zeros(1).to("cuda:0")
    v = torch.zeros(1).to(torch.device("cuda"), torch.float64)
    torch.cuda.synchronize()
    torch.cuda.set_device(0)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        pass
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); end.record()
    torch.cuda.nvtx.range_push("step"); torch.cuda.nvtx.range_pop()
    cpu_state = torch.get_rng_state()
    torch.cuda.manual_seed(5); first = torch.rand(3, device="cuda").tolist()
    dropped = torch.nn.functional.dropout(torch.ones(8, device="cuda"), 0.5)  # on a CPU tensor: the CPU's
    torch.cuda.manual_seed(5); again = torch.randn(1, device="cuda") is not None and torch.rand(3, device="cuda")
    cuda_draws = {"repeat_after_seeding": first != again.tolist(),  # randn moved it: the second rand differs
                  "cpu_generator_moved_only_by_cpu_work": not bool((torch.get_rng_state() == cpu_state).all())}
    torch.set_rng_state(cpu_state); torch.cuda.manual_seed(5)
    cuda_draws["same_after_reseed"] = torch.rand(3, device="cuda").tolist() == first
    torch.rand(5, device="cuda")
    cuda_draws["cpu_generator_untouched_by_cuda_draws"] = bool((torch.get_rng_state() == cpu_state).all())
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2, pin_memory=True, num_workers=1)
    print("FACTS " + json.dumps({
        "devices": [str(t.device) for t in (x, y, z, w, v)], "v_dtype": str(v.dtype),
        "type": z.type(), "type_to": z.type(torch.float64).dtype.__repr__(),
        "memory_allocated": torch.cuda.memory_allocated(), "device_count": torch.cuda.device_count(),
        "accelerator": torch.accelerator.is_available() if hasattr(torch, "accelerator") else False,
        "batches": [b.tolist() for b in loader], "argv": sys.argv, "name": __name__,
        "elapsed_ms_is_number": isinstance(start.elapsed_time(end), float), "cuda_draws": cuda_draws,
        "dynamo_disabled": os.environ.get("TORCHDYNAMO_DISABLE"),
        "python3_is_this_interpreter": os.popen("python3 -c 'import sys; print(sys.prefix)'").read().strip()
                                       == sys.prefix,
        "ext_suffix": os.popen("python3-config --extension-suffix").read().strip()}), flush=True)
    ''')


def _wrapped(tmp_path, entrypoint):
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "TORCHDYNAMO_DISABLE")}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(WRAP), "--hooks", "cpu", "--out", str(out), "--"] + entrypoint,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env,
                          timeout=300, cwd=str(tmp_path))
    record = json.loads((out / "pod_hooks.json").read_text())
    return done, record


@pytest.mark.skipif(not TORCH, reason="torch is not installed: the cpu layer patches torch (pip install -e '.[pod]')")
def test_the_layer_sends_cuda_requests_to_the_cpu_and_runs_the_script_as_main(tmp_path):
    folder = tmp_path / "megatron"
    folder.mkdir()
    (folder / "pretrain_gpt.py").write_text(SCRIPT)
    (folder / "helper_beside_the_script.py").write_text("")
    done, record = _wrapped(tmp_path, [sys.executable, str(folder / "pretrain_gpt.py"), "--seed", "7"])
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("FACTS "))[6:])
    assert facts["devices"] == ["cpu"] * 5 and facts["v_dtype"] == "torch.float64"
    assert facts["type"] == "torch.cuda.FloatTensor" and facts["type_to"] == "torch.float64"
    assert facts["memory_allocated"] == 0 and facts["device_count"] == 1 and facts["accelerator"] is False
    assert facts["batches"] == [[0, 1], [2, 3]]  # a loader asked to pin memory runs unpinned
    assert facts["argv"] == [str(folder / "pretrain_gpt.py"), "--seed", "7"] and facts["name"] == "__main__"
    assert facts["elapsed_ms_is_number"] and facts["dynamo_disabled"] == "1"
    # draws for a CUDA device come from a generator of their own, seeded by torch.cuda.manual_seed, as on a GPU
    assert facts["cuda_draws"] == {"repeat_after_seeding": True, "cpu_generator_moved_only_by_cpu_work": True,
                                   "same_after_reseed": True, "cpu_generator_untouched_by_cuda_draws": True}
    assert facts["python3_is_this_interpreter"]
    import sysconfig
    assert facts["ext_suffix"] == sysconfig.get_config_var("EXT_SUFFIX")
    assert "attune-cpu: a CPU run" in done.stderr
    hook = record["hooks"][0]
    assert hook["name"] == "cpu" and hook["status"] == "ok" and hook["facts"]["device"] == "cpu"
    assert record["launched"][:3] == [sys.executable, str(SCRIPTS / "pod_hooks" / "cpu.py"),
                                      str(folder / "pretrain_gpt.py")]
    assert hook["facts"]["layer_lines"] and hook["facts"]["layer_lines"][0].startswith("attune-cpu: ")


def test_an_entrypoint_without_a_training_script_starts_unchanged_and_the_hook_says_why(tmp_path):
    done, record = _wrapped(tmp_path, [sys.executable, "-c", "print('plain job')"])
    assert done.returncode == 0 and "plain job" in done.stdout
    hook = record["hooks"][0]
    assert hook["status"] == "failed" and "no Megatron-LM training script" in hook["error"]
    assert record["launched"] == [sys.executable, "-c", "print('plain job')"]


def test_the_layer_refuses_a_missing_script_without_importing_torch(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPTS / "pod_hooks" / "cpu.py"), str(tmp_path / "nope.py")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert done.returncode == 2 and "no training script" in done.stderr


MEGATRON_CPU_LOG = [
    "attune-cpu: a CPU run: CUDA requests go to the CPU, torch.cuda is stubbed (not a GPU measurement)\n",
    " [2026-12-01 23:35:08.197158] iteration        1/       5 | consumed samples:            4 | elapsed time per "
    "iteration (ms): 338.7 | throughput per GPU (TFLOP/s/GPU): 0.0 | learning rate: 9.140577E-05 | global batch size:"
    "     4 | lm loss: 7.053999E+00 | loss scale: 1.0 | grad norm: 1.134 | number of skipped iterations:   0 | "
    "number of nan iterations:   0 |\n",
    "[Rank 0] (after 1 iterations) memory (MB) | allocated: 0.00 | max allocated: 0.00 | reserved: 0.00 | "
    "max reserved: 0.00\n",
]


def test_a_cpu_runs_memory_and_tflops_are_unavailable_never_zero():
    parsed = logparse.parse_lines(MEGATRON_CPU_LOG)
    assert parsed["device"] == "cpu"
    assert parsed["steps"][0]["tflops_per_gpu"] is None and parsed["steps"][0]["elapsed_ms"] == 338.7
    memory = parsed["memory"][0]
    assert memory["allocated_mb"] is None and memory["max_reserved_mb"] is None
    assert "unavailable: a CPU run" in memory["unavailable"]
    assert any("unavailable: a CPU run" in warning for warning in parsed["warnings"])
    plain = logparse.parse_lines(MEGATRON_CPU_LOG[1:])  # the same lines without the layer's: a GPU's zeros
    assert plain["device"] is None and plain["memory"][0]["allocated_mb"] == 0.0
    assert plain["steps"][0]["tflops_per_gpu"] == 0.0


def test_the_layer_line_counts_only_at_the_start_of_a_line():
    parsed = logparse.parse_lines(["echo 'attune-cpu: quoted in a command'\n"] + MEGATRON_CPU_LOG[1:])
    assert parsed["device"] is None
