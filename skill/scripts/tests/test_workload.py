"""The fixed-shape workload is enforced on every run and is never a lever."""

from __future__ import annotations

from conftest import DATA

from attune.core import workload
from attune.core.recipe import Recipe

TEXT = (DATA / "recipes" / "megatron_rayjob.yaml").read_text()


def test_enforce_sets_the_benchmark_flags_and_profiles_only_on_request():
    plain = workload.enforce(Recipe(TEXT))
    args = plain.args()
    assert (args["--log-interval"], args["--exit-interval"], args["--log-throughput"]) == ("1", "20", True)
    assert args["--train-iters"] == "20"  # as the recipe had it
    assert "--profile" not in args
    profiled = workload.enforce(plain, profile=True).args()
    assert profiled["--profile"] is True and profiled["--profile-step-start"] == "16"
    assert "--profile" not in workload.enforce(workload.enforce(plain, profile=True)).args()
    assert workload.compare(Recipe(TEXT), plain) == []


def test_shape_changes_are_refused():
    base = workload.enforce(Recipe(TEXT))
    for flag, value in (("--seq-length", "8192"), ("--global-batch-size", "256"), ("--seed", "1"),
                        ("--data-path", "/other")):
        candidate = base.apply([{"op": "set", "arg": flag, "value": value}])
        problems = workload.compare(base, candidate)
        assert len(problems) == 1 and problems[0].startswith(flag) and "not a lever" in problems[0]
    lax = base.apply([{"op": "set", "arg": "--log-interval", "value": "10"}])
    assert "--log-interval must be '1'" in workload.compare(base, lax)[0]
