"""ATTUNE: agentic throughput tuning for Megatron-LM and slime recipes on KubeRay.

The package is layered, and every import points down (``tests/test_layers.py`` holds it):

* ``attune.core``, the kernel: errors, files, recipe and command parsing, legality, log parsing,
  levers, the chained log, schema, settings and the ledger reading the hooks share (``state``);
  it imports no other part.
* the domains, over the kernel only: ``correctness`` (the gate), ``projection`` (step time and
  memory), ``data`` (rows), ``profile_analyzer`` (traces) and ``pod_hooks`` (in-pod helpers);
* ``simulate``, the SIMULATED workload, over projection and correctness;
* ``attune.campaign``: the ledger, runs, ranking, budget, candidates and reports;
* on top, ``attune.cli`` (the ``attune`` command) and ``attune.planner`` (the scripted tuner).

``skill/scripts/attune.py`` loads this package from the tree it sits in, so the skill's read-only
copy runs without an install. The names below are the public surface; each is imported when first
used, so ``import attune`` stays cheap.
"""

__version__ = "0.1.0"

_SURFACE = {
    "Campaign": "attune.campaign.ledger",
    "Recipe": "attune.core.recipe",
    "Command": "attune.core.command",
    "Settings": "attune.core.settings",
    "load_settings": ("attune.core.settings", "load"),
    "AttuneError": "attune.core.errors",
    "InputError": "attune.core.errors",
    "CheckFailed": "attune.core.errors",
    "Rules": "attune.correctness.rules",
    "main": ("attune.cli", "main"),
}

__all__ = ["__version__"] + sorted(_SURFACE)


def __getattr__(name):
    where = _SURFACE.get(name)
    if where is None:
        raise AttributeError("module 'attune' has no attribute %r" % name)
    module, attribute = where if isinstance(where, tuple) else (where, name)
    import importlib
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__():
    return __all__
