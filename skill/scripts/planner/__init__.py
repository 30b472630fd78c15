"""The deterministic planner agent (``ATTUNE_AGENT=planner``).

* ``planner.space``: the search space (levers of the catalog as discrete alternatives, each checked for the
  workload, Megatron-LM's legality and the gate's classes) and the projection of every alternative;
* ``planner.policy``: the decision logic, pure functions of a ``State`` (``propose(state) -> Action``);
* ``planner.agent``: the program the launcher starts; it drives a campaign through the ``attune`` verbs only.

See ``planner/README.md`` for the policy.
"""
