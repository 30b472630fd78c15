"""The correctness gate: does a faster recipe still train the same model?

* ``rules``: the argument classes (``rules/numerics_list.yaml`` and a user's overrides).
* ``config_check``: every argument and environment variable the candidate changed, classed.
* ``convergence``: the candidate's loss against the baseline's, with Megatron-Bridge's
  ``validate_convergence`` thresholds and a check calibrated on the baseline's own reruns.
* ``gate``: run directories in, one verdict out (``attune gate``); ``PROTOCOL.md`` is the rulebook.
"""
