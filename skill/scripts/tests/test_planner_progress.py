"""The planner's progress lines: each ends with its UTC time, the time since the start and the budget's ETA at the
current burn rate, as the README's demo promises."""

from __future__ import annotations

import datetime
import io
import re
from pathlib import Path


PROGRESS_RE = re.compile(r" utc=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ elapsed=\d+:\d\d:\d\d"
                         r"(?: burn=\"[0-9.e+]+ [A-Za-z-]+/h\")? eta=(?:\d+:\d\d:\d\d|n/a)$")


def test_progress_lines_end_with_utc_elapsed_and_the_budgets_eta():
    from attune.planner import agent, progress

    ticks = iter([100.0, 110.0, 110.0, 130.0, 200.0])  # start, a line, two status calls, a line
    clock = progress.Clock(monotonic=lambda: next(ticks),
                           wall=lambda: datetime.datetime(2026, 12, 1, 20, 11, 50, tzinfo=datetime.timezone.utc))
    out = io.StringIO()
    planner = agent.Planner(Path("."), out=out)
    planner.clock = clock
    planner.event("launch", run="p-r001", purpose="baseline")  # nothing seen yet: no rate
    clock.seen({"spent": 10.0, "limit": 200.0, "unit": "GPU-hours"})
    clock.seen({"spent": 30.0, "limit": 200.0, "unit": "GPU-hours"})  # 20 GPU-hours in 20 s
    planner.event("result", run="p-r001", status="finished")
    first, second = out.getvalue().splitlines()
    assert first.startswith("planner: launch run=p-r001 purpose=baseline ")
    assert first.endswith(" utc=2026-12-01T20:11:50Z elapsed=0:00:10 eta=n/a")
    assert second == ('planner: result run=p-r001 status=finished utc=2026-12-01T20:11:50Z elapsed=0:01:40 '
                      'burn="3600 GPU-hours/h" eta=0:02:50')  # 170 GPU-hours left at 1 per second
    assert PROGRESS_RE.search(first) and PROGRESS_RE.search(second)
    assert all("utc=" not in line for line in planner.log_lines)  # the notes' log has its own time stamp
    spent = progress.fields(datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc), 5, None, None,
                            {"spent": 20, "limit": 20, "unit": "runs"}, 1.0)
    assert spent["eta"] == "0:00:00" and progress.duration(90061) == "25:01:01"
