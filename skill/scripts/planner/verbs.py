"""How the planner acts and reads: every action an ``attune`` verb run as a subprocess (exit code, ``--json``),
and the ledger and GPU-hour log read, never written, by the kernel's tolerant reader (``attune.core.state``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from attune.core import state as state_mod

ATTUNE = Path(__file__).resolve().parent.parent / "attune.py"


class Integrity(Exception):
    """A verb exited 3: the records are broken; nothing more may be launched."""


class PlannerError(Exception):
    pass


class VerbRunner(object):
    """The verbs and the records, for ``Planner`` (its ``dir``, ``python``, ``env`` and ``clock``)."""

    # ---------------------------------------------------------------- the verbs
    def verb(self, *args):
        """``(exit code, parsed JSON or None, stdout, stderr)`` of one ``attune`` verb."""
        argv = [self.python, str(ATTUNE)] + [str(a) for a in args]
        proc = subprocess.run(argv, cwd=str(self.dir), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
        data = None
        if "--json" in args:
            try:
                data = json.loads(out) if out.strip() else None
            except ValueError:
                data = None
        if proc.returncode == 3:
            raise Integrity(err.strip() or out.strip())
        if proc.returncode in (130, -2):  # the verb was interrupted (Ctrl-C reaches the whole process group)
            raise KeyboardInterrupt
        return proc.returncode, data, out, err

    def must(self, *args):
        code, data, out, err = self.verb(*args)
        if code != 0:
            raise PlannerError("attune %s exited %d: %s" % (" ".join(str(a) for a in args[:3]), code,
                                                             (err or out).strip()[-500:]))
        return data

    def status(self) -> dict:
        data = self.must("status", "--json")
        self.clock.seen(data["budget"])
        return data

    # ---------------------------------------------------------------- the ledger (read only)
    def ledger(self) -> list:
        return state_mod.read_rows(str(self.dir / state_mod.LEDGER))

    def gpu_charges(self) -> dict:
        """GPU-hours charged per run (the GPU-hour log)."""
        out = {}
        for row in state_mod.read_rows(str(self.dir / state_mod.GPU_LOG)):
            if row.get("kind") == "charge" and state_mod.number(row.get("gpu_seconds")) is not None:
                out[row.get("run")] = out.get(row.get("run"), 0.0) + row["gpu_seconds"] / 3600.0
        return out

    def recipe_text(self, run: str) -> str:
        return (self.dir / "runs" / run / "recipe.yaml").read_text(encoding="utf-8")
