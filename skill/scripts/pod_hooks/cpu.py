"""The ``cpu`` hook's start-up layer: run a Megatron-LM training script on a CPU-only torch.

    python3 cpu.py pretrain_gpt.py ARGS...        (the ``cpu`` hook puts it there; torchrun runs it per rank)

It changes nothing in the training program. Before the script runs it

- sends every CUDA device request to the CPU: factory calls and ``Tensor.to``/``Tensor.cuda`` that
  name ``cuda``, ``cuda:N`` or a device number get ``cpu`` (a torch function mode, so the script's
  own calls and Megatron-Core's are caught alike);
- draws random numbers for a CUDA device from a generator of their own, as a GPU's generator is its own:
  they never move the CPU generator the weights come from (Megatron's start-up fills warm-up tensors
  sized by the micro-batch and tensor-parallel sizes with ``torch.rand(..., device="cuda")``; drawn
  from the CPU generator they would make the initial weights depend on those placement settings);
  ``torch.cuda.manual_seed``, ``get_rng_state`` and ``set_rng_state`` act on that generator; and
  Megatron's JIT warm-up (``_warmup_jit_function``, which also runs dropout on those tensors) runs with
  the CPU generator's state saved and put back, as on a GPU, where all of it runs on the GPU's generator;
- ``Tensor.type()`` names the CUDA type (``torch.cuda.FloatTensor``): the tensor a GPU run would hold
  there (the distributed optimizer checks its parameters against those names);
- stubs the ``torch.cuda`` calls the training loop makes: ``device_count`` (0, so Megatron skips its
  own CUDA set-up and seeding), ``is_available`` (True, past Megatron's start-up assertion),
  ``current_device``, ``set_device``, ``synchronize``, ``empty_cache``, the memory counters (0: the
  CPU has no such counters, and ATTUNE reports them as unavailable), streams, events, the RNG state
  calls, device properties and NVTX ranges;
- tells torch's own code (``torch.accelerator``) that there is no accelerator;
- turns off pinned memory in data loaders (it is for copies to a GPU);
- makes the CUDA RNG tracker's ``fork`` a no-op context and ``model_parallel_cuda_manual_seed`` a
  no-op (with ``--use-cpu-initialization`` the weights come from the CPU generator, seeded by
  Megatron from ``--seed``);
- skips ``megatron.legacy.fused_kernels.load`` (CUDA kernels; the recipe turns every fusion off);
- puts this interpreter first on PATH as ``python3`` and ``python3-config`` (Megatron compiles its
  dataset helpers with the ``python3`` PATH finds, and they must load in the job's interpreter);
- sets ``TORCHDYNAMO_DISABLE=1`` unless the job set it (Megatron's ``torch.compile``-d fusions).

Then it runs the script as ``__main__`` with its own folder first on ``sys.path``, as ``python3
script.py`` would. The flags a CPU run needs are the recipe's, not this layer's (``--distributed-backend
gloo --use-cpu-initialization --transformer-impl local --no-gradient-accumulation-fusion ...``, see
``pod_hooks/README.md``). Import-time: standard library only; torch is imported when it runs.
"""

import atexit
import contextlib
import os
import runpy
import shutil
import sys
import tempfile
import types

MARK = "attune-cpu: "


def _is_cuda(device):
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True
    text = str(device)
    return text == "cuda" or text.startswith("cuda:")


_CUDA_GENERATOR = []  # the stand-in for the GPU's own generator, made when torch is imported


def _cuda_generator(torch):
    if not _CUDA_GENERATOR:
        generator = torch.Generator()
        generator.manual_seed(0)  # fixed: a run is reproducible whatever it seeds or not
        _CUDA_GENERATOR.append(generator)
    return _CUDA_GENERATOR[0]


def _install_device_mode(torch):
    from torch.overrides import TorchFunctionMode

    tensor_cuda, tensor_to, tensor_type = torch.Tensor.cuda, torch.Tensor.to, torch.Tensor.type
    cpu = torch.device("cpu")
    generator = _cuda_generator(torch)
    random = {getattr(torch, name) for name in ("rand", "randn", "randint", "randperm", "normal")
              if hasattr(torch, name)}

    class CpuDevices(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is tensor_cuda:
                return args[0]
            if func is tensor_type and len(args) == 1 and not kwargs:  # the type name a CUDA tensor would give:
                name = func(*args)  # Megatron checks parameters against torch.cuda.*Tensor
                return name.replace("torch.", "torch.cuda.", 1) if not name.startswith("torch.cuda.") else name
            if "device" in kwargs and _is_cuda(kwargs["device"]):
                kwargs["device"] = cpu
                if func in random and kwargs.get("generator") is None:
                    kwargs["generator"] = generator  # the GPU's own generator, not the CPU's
            if func is tensor_to:
                args = tuple(cpu if (i > 0 and not isinstance(a, torch.Tensor) and not isinstance(a, torch.dtype)
                                     and _is_cuda(a)) else a for i, a in enumerate(args))
            return func(*args, **kwargs)

    mode = CpuDevices()
    mode.__enter__()  # for the life of the process
    return mode


class _Event(object):
    def __init__(self, *args, **kwargs):
        self._time = None

    def record(self, *args, **kwargs):
        import time
        self._time = time.perf_counter()

    def synchronize(self):
        pass

    def wait(self, *args, **kwargs):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        return 1000.0 * ((other._time or 0.0) - (self._time or 0.0))


class _Stream(object):
    def __init__(self, *args, **kwargs):
        pass

    def synchronize(self):
        pass

    def wait_stream(self, *args, **kwargs):
        pass

    def wait_event(self, *args, **kwargs):
        pass

    def record_event(self, event=None):
        event = event or _Event()
        event.record()
        return event

    def query(self):
        return True


def _unpin_loaders(torch):
    """Pinned host memory is for copies to a GPU: a CPU run's data loaders never pin."""
    loader = torch.utils.data.DataLoader
    original = loader.__init__

    def __init__(self, *args, **kwargs):
        kwargs["pin_memory"] = False
        original(self, *args, **kwargs)

    loader.__init__ = __init__


def _stub_cuda(torch):
    cuda = torch.cuda
    stream = _Stream()
    generator = _cuda_generator(torch)

    def const(value):  # a new function each time: torch's dynamo refuses one object under two names
        return lambda *a, **k: value

    zero, none = (lambda: const(0)), (lambda: const(None))
    properties = types.SimpleNamespace(name="cpu (attune-cpu layer)", total_memory=0, major=0, minor=0,
                                       multi_processor_count=os.cpu_count() or 1)
    stubs = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": none(),
        "synchronize": none(),
        "empty_cache": none(),
        "memory_allocated": zero(), "max_memory_allocated": zero(),
        "memory_reserved": zero(), "max_memory_reserved": zero(),
        "reset_peak_memory_stats": none(), "reset_max_memory_allocated": none(),
        "memory_stats": lambda *a, **k: {},
        "mem_get_info": lambda *a, **k: (0, 0),
        "get_device_properties": lambda *a, **k: properties,
        "get_device_capability": lambda *a, **k: (0, 0),
        "get_device_name": lambda *a, **k: properties.name,
        "get_rng_state": lambda *a, **k: generator.get_state(),
        "set_rng_state": lambda state, *a, **k: generator.set_state(state),
        "manual_seed": lambda seed, *a, **k: generator.manual_seed(int(seed)) and None,
        "manual_seed_all": lambda seed, *a, **k: generator.manual_seed(int(seed)) and None,
        "Stream": _Stream, "Event": _Event,
        "current_stream": lambda *a, **k: stream,
        "default_stream": lambda *a, **k: stream,
        "set_stream": none(),
        "stream": lambda *a, **k: contextlib.nullcontext(),
    }
    for name, value in stubs.items():
        setattr(cuda, name, value)
    cuda.random.get_rng_state = stubs["get_rng_state"]  # activation recompute saves and restores it
    cuda.random.set_rng_state = stubs["set_rng_state"]
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:  # torch's own code (optimizers, data loaders) asks here: no accelerator
        accelerator.is_available = const(False)
        accelerator.current_accelerator = const(None)
        accelerator.device_count = const(0)
    nvtx = types.SimpleNamespace(range_push=none(), range_pop=none(), mark=none(),
                                 range=lambda *a, **k: contextlib.nullcontext())
    cuda.nvtx = nvtx
    sys.modules["torch.cuda.nvtx"] = nvtx


class _MegatronPatches(object):
    """Patch Megatron modules as they are first imported (they import torch themselves)."""

    def find_spec(self, name, path=None, target=None):
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                loader = spec.loader
                original = loader.exec_module

                def exec_module(module, _original=original, _name=name):
                    _original(module)
                    _PATCHES[_name](module)

                loader.exec_module = exec_module
                return spec
        return None


def _patch_random(module):
    module.model_parallel_cuda_manual_seed = lambda *a, **k: None
    if hasattr(module, "_get_cuda_rng_state"):  # recompute saves the CUDA generator's state beside the CPU's
        module._get_cuda_rng_state = lambda *a, **k: module.torch.get_rng_state()
    if hasattr(module, "_set_cuda_rng_state"):
        module._set_cuda_rng_state = lambda *a, **k: None
    tracker = getattr(module, "CudaRNGStatesTracker", None)
    if tracker is not None:
        tracker.fork = lambda self, *a, **k: contextlib.nullcontext()
        tracker.add = lambda self, *a, **k: None


def _patch_initialize(module):
    warmup = getattr(module, "_warmup_jit_function", None)
    if warmup is None:
        return

    def _warmup_jit_function(*args, **kwargs):
        with module.torch.random.fork_rng(devices=[]):  # the CPU generator is where it was before
            return warmup(*args, **kwargs)

    module._warmup_jit_function = _warmup_jit_function


def _patch_fused_kernels(module):
    module.load = lambda *a, **k: None


_PATCHES = {
    "megatron.core.tensor_parallel.random": _patch_random,
    "megatron.legacy.fused_kernels": _patch_fused_kernels,
    "megatron.training.initialize": _patch_initialize,
}


_CONFIG = """#!%s
import sys, sysconfig
# python3-config for the job's own interpreter (the attune-cpu layer): Megatron's dataset helpers are built for it
answers = {"--extension-suffix": sysconfig.get_config_var("EXT_SUFFIX"),
           "--includes": "-I%%s -I%%s" %% (sysconfig.get_path("include"), sysconfig.get_path("platinclude"))}
unknown = [arg for arg in sys.argv[1:] if arg not in answers]
if unknown or not sys.argv[1:]:
    sys.exit("python3-config (attune-cpu): only --extension-suffix and --includes")
print(" ".join(answers[arg] for arg in sys.argv[1:]))
"""


def job_interpreter_first():
    """``python3`` and ``python3-config`` on PATH are this interpreter: Megatron builds its dataset helpers
    (``megatron/core/datasets/Makefile``) with whatever ``python3`` PATH finds, and they must load here."""
    folder = tempfile.mkdtemp(prefix="attune-cpu-bin-")
    atexit.register(shutil.rmtree, folder, True)
    # a script, not a symlink: a virtual environment's interpreter finds its packages from the path it is run by
    for name, text in (("python3", '#!/bin/sh\nexec "%s" "$@"\n' % sys.executable),
                       ("python3-config", _CONFIG % sys.executable)):
        path = os.path.join(folder, name)
        with open(path, "w") as handle:
            handle.write(text)
        os.chmod(path, 0o755)
    os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", os.defpath)


def install():
    """Set up torch for a CPU run; called once, before the training script runs."""
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    job_interpreter_first()
    import torch

    _stub_cuda(torch)
    _unpin_loaders(torch)
    _install_device_mode(torch)
    sys.meta_path.insert(0, _MegatronPatches())


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.stderr.write("usage: cpu.py SCRIPT [ARGS...]\n")
        return 2
    script = os.path.abspath(argv[0])
    if not os.path.isfile(script):
        sys.stderr.write("%sno training script %s\n" % (MARK, script))
        return 2
    install()
    sys.stderr.write("%sa CPU run: CUDA requests go to the CPU, torch.cuda is stubbed (not a GPU measurement)\n"
                     % MARK)
    sys.argv = argv
    sys.path[0] = os.path.dirname(script)
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
