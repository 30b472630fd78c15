"""The throughput chart of RESULTS.md (``results_throughput.png``), drawn with matplotlib (the ``plot`` extra).

One point per run in launch order, shaped by purpose (baseline, repeat, candidate, confirmation) and green
for the recipes the leader is made of (its kept ancestors and itself); failed runs are a red cross at the
foot of the chart at their place in the order, with their failure class; the best-so-far line is the
leader after each run (``ranking.leader_history``), with what a 2-run candidate must beat to lead (the leader test)
once it is established; candidates carry their lever's name (a ``−`` when the change removes a flag).

``chart_data`` reduces a ranking to small plain data (it crosses to the process that draws it), ``figure``
builds the matplotlib figure from it (tests inspect its artists: each carries a ``gid``), ``draw`` saves it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from attune.core import files

from .ranking import Ranking, band_text, leader_history
from .results import SIMULATED, describe_change, one_line

MAX_LABELS = 30  # beyond this many candidates only the leader's own changes are named: the rest would be a smear
MAX_LINEAGE_LABELS = 12  # and of those, the latest this many
MAX_FAILURE_LABELS = 40  # likewise for the failure classes and reasons at the foot of the chart
LABEL_CHARS = 24
REMOVALS = ("unset", "remove")
PURPOSES = {  # purpose: (marker, filled, legend text)
    "baseline": ("s", True, "baseline"),
    "repeat": ("s", False, "repeat of the baseline"),
    "candidate": ("o", True, "candidate"),
    "confirm": ("D", False, "confirmation"),
    "other": ("^", False, "repeat of a candidate"),
}
COLORS = {"baseline": "0.35", "kept": "tab:green", "other": "tab:blue", "failed": "tab:red", "unscored": "0.45"}


def lever_label(run) -> str:
    """A candidate's short label: its lever (else its change), ``−`` first when the change only removes flags."""
    changes = run.change if isinstance(run.change, list) else [run.change] if isinstance(run.change, dict) else []
    text = run.lever
    if not text:
        text = describe_change(run.change).replace("set --", "").replace("--", "")
    if changes and all(isinstance(c, dict) and c.get("op") in REMOVALS for c in changes):
        text = "−" + text
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def _failure_class(run) -> str:
    failure = run.failure or {}
    return str(failure.get("class") or ("hang" if run.status == "timeout" else run.status))


def chart_data(ranking: Ranking) -> dict:
    """What the chart shows, as small plain data."""
    history = leader_history(ranking)
    lead = ranking.leader
    kept = set(ranking.kept) | ({lead.sha} if lead is not None and not lead.is_baseline else set())
    colours = {sha: "baseline" if recipe.is_baseline else "kept" if sha in kept else "other"
               for sha, recipe in ranking.recipes.items()}
    series = {}  # (purpose, colour) -> ([x], [y])
    failed, unscored, labels = [], [], []
    simulated = cpu = False
    for index, run in enumerate(ranking.runs, 1):
        simulated = simulated or run.simulated
        cpu = cpu or run.cpu
        score = run.score
        if score is None or not score.rankable:
            if run.status == "running":
                unscored.append((index, "running"))
            elif run.status != "finished":
                failed.append((index, _failure_class(run)))
            else:
                unscored.append((index, "profile" if run.purpose == "profile" or run.profiled
                                 else one_line(score.why.split(" at iteration")[0] if score else "", 18)))
            continue
        colour = colours[run.recipe]
        purpose = run.purpose
        if purpose == "candidate":
            labels.append((index, run, colour == "kept"))
        elif purpose == "repeat" and colour != "baseline" or purpose not in PURPOSES:
            purpose = "other"
        xs, ys = series.setdefault((purpose, colour), ([], []))
        xs.append(index)
        ys.append(score.tokens_per_s_per_gpu)
    if len(labels) > MAX_LABELS:  # the leader's own changes only, the latest of them when even those are many
        labels = [label for label in labels if label[2]][-MAX_LINEAGE_LABELS:]
    return {
        "series": [(purpose, colour, xs, ys) for (purpose, colour), (xs, ys) in sorted(series.items())],
        "failed": failed,
        "failure_labels": len(failed) + len(unscored) <= MAX_FAILURE_LABELS,
        "unscored": unscored,
        "labels": [(x, run.tokens, lever_label(run)) for x, run, _kept in labels],
        "best": [score for score, _band, _established in history],
        "band": [band if established else None for _score, band, established in history],
        "band_text": band_text(ranking.band) if ranking.band_established else "",
        "leader": lead.first.run if lead is not None else None,
        "simulated": simulated,
        "cpu": cpu and not simulated,
    }


def preload_plotting() -> None:
    """Import matplotlib ahead of time (the slow part of drawing); a missing one is reported later."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        pass


def draw_chart(ranking: Ranking, path: Path) -> Optional[str]:
    """Draw the throughput chart; return None on success, else why it was not drawn."""
    return draw(Path(path), chart_data(ranking))


def draw(path: Path, data: dict) -> Optional[str]:
    """Draw ``chart_data`` output to ``path``; return None on success, else why it was not drawn."""
    try:
        fig = figure(data)
    except ImportError:
        return "matplotlib is not installed (pip install 'attune[plot]')"
    if fig is None:
        return "no finalized run yet"
    try:
        with files.replacing(path) as handle:
            fig.savefig(handle, format="png")
    except files.LinkRefused as exc:  # planted after `rank` checked it: not drawn, said why
        return str(exc)
    return None


def figure(data: dict):
    """The chart as a matplotlib ``Figure`` (None when there is nothing to draw); raises ImportError without it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    series, failed, unscored = data["series"], data["failed"], data["unscored"]
    if not series and not failed and not unscored:
        return None
    fig = Figure(figsize=(10, 6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    handles = []
    count = len(data["best"])
    xs = list(range(1, count + 1)) + [count + 0.5]  # the last step runs half a run past the last run
    best = [math.nan if value is None else value for value in data["best"]]
    best.append(best[-1])
    need = [math.nan if value is None else value for value in data["band"]]
    need.append(need[-1])
    if any(not math.isnan(value) for value in need):
        ax.step(xs, [b * (1 + h) for b, h in zip(best, need)], where="post", color=COLORS["kept"],
                linewidth=0.8, linestyle=(0, (2, 3)), gid="to-lead", zorder=2)
        handles.append(Line2D([], [], color=COLORS["kept"], linewidth=0.8, linestyle=(0, (2, 3)),
                              label="to lead with 2 runs: %s (the leader test)" % data["band_text"]))
    if any(not math.isnan(value) for value in best):
        ax.step(xs, best, where="post", color=COLORS["kept"], linewidth=1.6, gid="best-so-far",
                zorder=2 if count <= 300 else 5)  # over thousands of points it would be hidden
        handles.append(Line2D([], [], color=COLORS["kept"], linewidth=1.6,
                              label="best so far: the leader%s" % (" (now %s)" % data["leader"] if data["leader"]
                                                                   else "")))
    shown = set()
    size = 6 if count <= 300 else 3  # thousands of runs: small marks, drawn faster and still apart
    for purpose, colour, pxs, pys in series:
        marker, filled, _text = PURPOSES[purpose]
        color = COLORS[colour]
        ax.plot(pxs, pys, linestyle="none", marker=marker, markersize=size, markeredgewidth=size / 5, color=color,
                markerfacecolor=color if filled else "white", gid="runs:%s:%s" % (purpose, colour), zorder=3)
        shown.add(purpose)
    for purpose in ("baseline", "repeat", "candidate", "confirm", "other"):
        if purpose in shown:
            marker, filled, text = PURPOSES[purpose]
            handles.append(Line2D([], [], linestyle="none", marker=marker, markersize=6, color="0.25",
                                  markerfacecolor="0.25" if filled else "white", label=text))
    if any(colour == "kept" for _purpose, colour, _xs, _ys in series):
        handles.append(Patch(color=COLORS["kept"], label="green: the leader and the changes it keeps"))
    for x, y, text in data["labels"]:
        ax.annotate(text, (x, y), xytext=(4, 5), textcoords="offset points", fontsize=7, rotation=30,
                    ha="left", va="bottom", color="0.15", gid="label", zorder=4)
    foot = ax.get_xaxis_transform()  # x in data, y in axes fractions: the foot of the chart
    for points, marker, color, gid, legend in (
            (failed, "x", COLORS["failed"], "failed", "failed run, with its failure class"),
            (unscored, "|", COLORS["unscored"], "unscored", "not scored (running, profile, NaN...)")):
        if not points:
            continue
        ax.plot([x for x, _text in points], [0.04] * len(points), linestyle="none", marker=marker, markersize=8,
                markeredgewidth=1.8, color=color, transform=foot, gid=gid, zorder=4)
        if data["failure_labels"]:
            for x, text in points:
                ax.text(x, 0.075, text, transform=foot, fontsize=7, rotation=90, ha="center", va="bottom",
                        color=color, gid=gid + "-label")
        handles.append(Line2D([], [], linestyle="none", marker=marker, markersize=8, markeredgewidth=1.8,
                              color=color, label=legend))
    values = [y for _p, _c, _xs, ys in series for y in ys] + [
        b * (1 + h) for b, h in zip(best, need) if not math.isnan(b) and not math.isnan(h)]
    if values:
        low, high = min(values), max(values)
        span = (high - low) or abs(high) * 0.05 or 1.0
        # room below for the marks at the foot and their text, above for the lever labels
        foot_room = 0.55 if (failed or unscored) and data["failure_labels"] else 0.25 if failed or unscored else 0.1
        ax.set_ylim(low - span * foot_room, high + span * 0.22)
    # room on the right for the labels of the last runs (they lean right)
    ax.set_xlim(0.5, count + 0.5 + (max(1.5, count * 0.12) if data["labels"] else 0))
    if count <= 20:
        ax.set_xticks(range(1, count + 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("tokens/s/GPU of every run, in launch order" + (" (%s)" % SIMULATED if data["simulated"] else
                                                                  " (cpu: a real program on a CPU)" if data.get("cpu")
                                                                  else ""))
    ax.set_xlabel("run (launch order)")
    ax.set_ylabel("tokens/s/GPU")
    ax.grid(True, alpha=0.25)
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize="small", frameon=False)
    rows = (len(handles) + 2) // 3
    fig.subplots_adjust(left=0.09, right=0.97, top=0.94, bottom=0.1 + 0.035 * rows)
    return fig
