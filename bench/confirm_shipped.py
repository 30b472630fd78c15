"""A campaign's shipped gain, measured again: fresh runs of its baseline and its shipped recipe, side by side.

    python bench/confirm_shipped.py CAMPAIGN_DIR [--pairs 3] [--out bench/results/confirm_shipped.json]

For a campaign of the real demo (``harness/launch_campaign.sh --demo-real``): runs the campaign's
``baseline.yaml`` and its shipped ``recipe.yaml`` ``--pairs`` times each, alternating (baseline first in even
pairs, shipped first in odd ones, so that a drift of the host spreads over both), outside the campaign and
its budget, exactly as ``bench_megatron_cpu.py`` runs a variant (the local backend's command through the pod
hooks wrapper with the ``cpu`` hook; iterations 5-19 scored as a campaign scores them). Reports every run, the
medians, the gain of the medians, and the gain the campaign's REPORT.md claimed.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import bench_megatron_cpu as lever_bench  # noqa: E402  (sets the import paths)
from attune.core.recipe import Recipe  # noqa: E402


def claimed_gain(report: Path):
    """The gain REPORT.md states for the shipped recipe (a fraction), or None."""
    if not report.is_file():
        return None
    match = re.search(r"^\| Gain \| ([+-][0-9.]+)%", report.read_text(encoding="utf-8"), re.M)
    return float(match.group(1)) / 100 if match else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("campaign", help="the campaign directory (its baseline.yaml and shipped recipe.yaml)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "confirm_shipped.json"))
    parser.add_argument("--keep", default="", help="keep every run's folder (its log) under this directory")
    args = parser.parse_args(argv)
    campaign = Path(args.campaign)
    recipes = {}
    for name, file in (("baseline", "baseline.yaml"), ("shipped", "recipe.yaml")):
        path = campaign / file
        if not path.is_file():
            sys.exit("confirm_shipped: %s is missing (%s): a finished campaign has both" % (path, name))
        recipes[name] = Recipe(path.read_text(encoding="utf-8"), str(path))
    keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="attune-confirm-"))
    runs = {"baseline": [], "shipped": []}
    for pair in range(args.pairs):
        order = ("baseline", "shipped") if pair % 2 == 0 else ("shipped", "baseline")
        for name in order:
            workdir = keep / ("%s-%d" % (name, pair))
            workdir.mkdir(parents=True, exist_ok=True)
            row = lever_bench.run_once(recipes[name], workdir)
            runs[name].append(row)
            print("pair %d %s: %s tokens/s/GPU (%.0f s, exit %s)%s" % (
                pair, name, "%.1f" % row["tokens_per_s_per_gpu"] if row["tokens_per_s_per_gpu"] else "n/a",
                row["wall_s"], row["exit_code"], "" if row["why"] is None else ": " + row["why"]), flush=True)
    medians = {}
    for name, rows in runs.items():
        values = [row["tokens_per_s_per_gpu"] for row in rows if row["tokens_per_s_per_gpu"]]
        medians[name] = statistics.median(values) if values else None
    gain = medians["shipped"] / medians["baseline"] - 1 if medians["baseline"] and medians["shipped"] else None
    claimed = claimed_gain(campaign / "REPORT.md")
    out = {"campaign": str(campaign), "pairs": args.pairs, "runs": runs, "medians": medians, "gain": gain,
           "claimed_gain": claimed, "device": sorted({row["device"] or "unknown" for rows in runs.values()
                                                      for row in rows})}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print("medians: baseline %s, shipped %s tokens/s/GPU; gain %s (the campaign claimed %s); runs kept in %s" % (
        medians["baseline"], medians["shipped"], "%+.1f%%" % (100 * gain) if gain is not None else "n/a",
        "%+.1f%%" % (100 * claimed) if claimed is not None else "n/a", keep))
    return 0 if gain is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
