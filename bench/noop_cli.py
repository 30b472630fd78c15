#!/usr/bin/env python3
"""No-op campaigns through the real CLI (not a test: it measures, it never fails on a number).

    .venv/bin/python bench/noop_cli.py --campaigns 30 [--levers 1] [--work /tmp/noop-cli] [--baseline-repeats 3]

Each campaign is a real ``attune`` campaign on the local backend running the SIMULATED workload
(``simulate/recipes/llama3_70b_h100x64.yaml``, ``sim_megatron.py`` in place of ``pretrain_gpt.py``): ``attune
init``, the baseline launched ``--baseline-repeats`` times, then K candidates, each ``attune candidate new
--parent <the leader>`` with one environment variable that changes nothing (``NCCL_DEBUG`` and friends:
logging only, classed placement, ignored by the simulator), launched, confirmed (``--repeat-of --confirm``),
finalized and gated (``attune gate --run``); a ``repeat`` line in ``attune status --json``'s ``pending`` is
followed as written (``launch --repeat-of``) until there is none. Every number comes from the CLI's own JSON;
a campaign whose leader is not the baseline at the end crowned a no-op. Each campaign gets its own run prefix,
so the simulator's ``ATTUNE_SIM_SEED=auto`` draws each run's noise from its own run id.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from noop_bench import REPEAT, wilson  # noqa: E402

RECIPE = REPO / "skill" / "scripts" / "simulate" / "recipes" / "llama3_70b_h100x64.yaml"
SIM = REPO / "skill" / "scripts" / "simulate" / "sim_megatron.py"
NOOPS = ["NCCL_DEBUG=WARN", "NCCL_DEBUG_SUBSYS=INIT", "NCCL_DEBUG=VERSION", "NCCL_DEBUG_SUBSYS=COLL",
         "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=ENV", "NCCL_DEBUG=WARN", "NCCL_DEBUG_SUBSYS=INIT,ENV",
         "NCCL_DEBUG=VERSION", "NCCL_DEBUG_SUBSYS=NET"]


class Cli(object):
    def __init__(self, attune: str, campaign: Path):
        self.attune, self.campaign = attune, campaign
        self.calls = 0

    def __call__(self, *argv, ok=(0,)) -> dict:
        self.calls += 1
        done = subprocess.run([self.attune, argv[0], "--campaign", str(self.campaign), "--json"] + list(argv[1:]),
                              capture_output=True, text=True)
        if done.returncode not in ok:
            raise SystemExit("attune %s exited %d: %s%s" % (" ".join(argv), done.returncode, done.stdout[-2000:],
                                                            done.stderr[-2000:]))
        return json.loads(done.stdout) if done.stdout.strip() else {}

    def run(self, *launch_args) -> str:
        """Launch, wait for the run to end and finalize it; returns the run id."""
        run = self("launch", *launch_args)["launch"]["run"]
        deadline = time.monotonic() + 120
        while True:
            state = self("poll", run)
            if state.get("done"):
                break
            if time.monotonic() > deadline:
                raise SystemExit("run %s did not end in 120 s: %s" % (run, state))
            time.sleep(0.2)
        self("finalize", run)
        return run


def one_campaign(index: int, levers: int, repeats: int, work: Path, attune: str) -> dict:
    where = work / ("c%03d" % index)
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    (where / "baseline.yaml").write_text(RECIPE.read_text(encoding="utf-8").format(python=sys.executable, sim=SIM),
                                         encoding="utf-8")
    (where / "config.env").write_text("ATTUNE_BACKEND=local\nATTUNE_BASELINE_YAML=%s\nATTUNE_RUN_PREFIX=noop%03d-\n"
                                      "ATTUNE_BASELINE_REPEATS=%d\nAUTOTUNE_GPUH_BUDGET=\nAUTOTUNE_BUDGET=200\n"
                                      % (where / "baseline.yaml", index, repeats), encoding="utf-8")
    cli = Cli(attune, where / "c")
    cli("init", "--config", str(where / "config.env"), "--campaign-id", "noop-cli-%03d" % index)
    for _ in range(repeats):
        cli.run("--baseline")
    runs, extra = repeats, 0
    for lever in range(levers):
        status = cli("status")
        leader = status["leader"]["run"]
        parent = "baseline" if status["leader"]["recipe_sha256"] == status["baseline"]["recipe_sha256"] else leader
        made = cli("candidate", "new", "--parent", parent, "--env", NOOPS[lever % len(NOOPS)],
                   "--lever", "other: no-op", "--hypothesis", "changes nothing: logging only")
        run = made["run"]
        cli.run(run)
        cli.run("--repeat-of", run, "--confirm")
        cli("gate", "--run", run, ok=(0, 1))
        runs += 2
        while True:
            pending = [REPEAT.match(line) for line in cli("status")["pending"]]
            todo = [m for m in pending if m and m.group(1) == run]
            if not todo:
                break
            cli.run("--repeat-of", todo[0].group(2))
            runs, extra = runs + 1, extra + 1
    status = cli("status")
    false = status["leader"]["recipe_sha256"] != status["baseline"]["recipe_sha256"]
    return {"campaign": index, "false_win": false, "leader": status["leader"]["run"], "runs": runs, "extra": extra,
            "calls": cli.calls, "band": status["band"]["text"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaigns", type=int, default=30)
    parser.add_argument("--levers", type=int, default=1)
    parser.add_argument("--baseline-repeats", type=int, default=3)
    parser.add_argument("--work", default="/tmp/noop-cli", help="where the campaigns are written (emptied per campaign)")
    parser.add_argument("--attune", default=str(Path(sys.executable).parent / "attune"), help="the attune CLI")
    args = parser.parse_args(argv)
    work = Path(args.work)
    print("data: SIMULATED workload on the local backend, through the real CLI (%s)" % args.attune)
    started = time.monotonic()
    got = []
    for index in range(args.campaigns):
        one = one_campaign(index, args.levers, args.baseline_repeats, work, args.attune)
        got.append(one)
        print("campaign %d: leader %s%s, %d runs (%d repeats), %d CLI calls, a 2-run candidate needs %s" % (
            index, one["leader"], " (a no-op: false win)" if one["false_win"] else " (the baseline)", one["runs"],
            one["extra"], one["calls"], one["band"]), flush=True)
    hits = sum(one["false_win"] for one in got)
    lo, hi = wilson(hits, len(got))
    print("K=%d, %d baseline runs: campaigns crowning a no-op %d/%d = %.1f%% (95%% CI %.1f-%.1f%%); runs a campaign "
          "%.2f (%.2f repeats); %.0f s" % (args.levers, args.baseline_repeats, hits, len(got), 100.0 * hits / len(got),
                                          100 * lo, 100 * hi, sum(o["runs"] for o in got) / len(got),
                                          sum(o["extra"] for o in got) / len(got), time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
