"""ATTUNE's in-pod hooks: a wrapper run around the real training entrypoint, and its hook registry.

``python3 -m attune.pod_hooks.wrap --hooks NAME[,NAME...] --out DIR -- ENTRYPOINT...`` (see ``wrap``). The
hooks live in ``hooks.HOOKS``; ``profiler.maybe_profile`` and ``memory.install`` are the helpers a
plain torch job calls. Standard library only: this package runs inside arbitrary training images
(Python 3.8+) and imports nothing else of ``attune``. README.md documents every hook.
"""
