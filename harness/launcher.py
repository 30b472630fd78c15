#!/usr/bin/env python3
"""The campaign launcher behind ``harness/launch_campaign.sh``.

    launch_campaign.sh <campaign_dir> [goal_prompt.txt] [--session ID] [--prepare] [--config FILE]
                       [--agent-command CMD]
    launch_campaign.sh --demo [campaign_dir] [--demo-model MODEL] [--demo-budget GPUH] [--demo-in-flight K]
    launch_campaign.sh --help      (both forms and every option, plain text)

First launch: validates the settings, runs ``attune doctor``'s checks (``attune.campaign.doctor``: the
baseline, its image, the agent CLI, the cluster, the rows' rows_sha256; every launch, and ``--prepare``
too; a failing check stops the launch with exit 1 and every check's line on stderr), prepares the
campaign directory (read-only copies of ``skill/`` and ``harness/`` under ``.attune/``, the skill linked
where Claude Code discovers it, the frozen settings, ``levers.md`` seeded from the skill's catalog when
it has one, the goal and resume prompts, the campaign's ``attune`` wrapper in ``.attune/bin`` (first on
the agent's PATH), and a Claude Code settings file holding the hooks and the Bash sandbox the agent works
in: ``sandbox.py``), records
integrity and starts the agent. A later launch verifies integrity first; ``--session ID`` resumes that
agent session with the resume prompt, and reuses the cluster checks that passed at the launch that
started the session when the settings, the baseline and ``KUBECONFIG`` are the same
(``.attune/cache/doctor.json``); the other checks run again. ``--prepare`` does everything but start an
agent.

The agent: ``ATTUNE_AGENT=planner`` runs the deterministic planner
(``.attune/skill/scripts/planner/agent.py``, from the campaign's read-only skill copy, with this Python)
through the same path as Claude: the same session records, integrity record and check around it, and the
Stop hook's rule (``hooks/stop.py``'s ``decide``) checked after it exits, since it calls no hooks: a planner
that exits 0 while the rule does not hold is resumed with ``--session``, at most ``MAX_CAP_RESUMES`` times;
its progress lines (stderr) are copied to the launcher's stderr as they come. ``ATTUNE_AGENT=claude`` runs
``claude -p`` headless with the settings file (hooks), the model from the settings, the web tools removed
when ``AUTOTUNE_ALLOW_WEB=0``, and JSON output kept under ``.attune/sessions/``. Each session's id, model
cost, token usage and end reason go to ``.attune/sessions.jsonl`` and the ledger. ``--agent-command CMD``
runs another agent through the same path (it gets ``ATTUNE_CAMPAIGN_DIR`` and the prompt file as
``ATTUNE_PROMPT_FILE``, and may print a result object like ``claude -p --output-format json``). When
Claude Code's Stop-hook block cap ends a session early (a success with an empty result while the campaign
is not over), the launcher resumes it, at most ``MAX_CAP_RESUMES`` times.

Exit codes: 0 finished (budget spent or stop recorded, and REPORT.md written); 1 agent failure
(resumable with --session) or a failing doctor check (nothing started); 2 bad settings or usage; 3 integrity violation (every run the ledger
tracks as live is torn down first).
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "hooks"))
sys.path.insert(0, str(REPO / "skill" / "scripts"))

import campaign_files  # noqa: E402
import integrity  # noqa: E402
import sandbox  # noqa: E402
from stop import campaign_state, decide as stop_decide, over as stop_over  # noqa: E402

from attune.campaign import ledger as campaign_mod  # noqa: E402
from attune.campaign import doctor as doctor_mod  # noqa: E402
from attune.core import frozen as frozen_mod, settings as settings_mod  # noqa: E402
from attune.core.errors import (EXIT_CHECK_FAILED, EXIT_INTEGRITY, EXIT_OK, EXIT_USAGE, AttuneError,  # noqa: E402
                                InputError)

MAX_CAP_RESUMES = 3
_RESUME = []  # the resume command of each session this process started, for the line Ctrl-C prints
CLAUDE_SETTINGS = ".attune/claude_settings.json"
PLANNER = ".attune/skill/scripts/planner/agent.py"  # the planner agent, from the campaign's read-only skill copy
SKILL_LINK = ".claude/skills/attune"
PROMPTS = {"goal": "goal_prompt.txt", "resume": "resume_prompt.txt"}
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "tests", "out")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _read_only(root: Path) -> None:
    """Strip write permission from a copied tree (files and folders)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    for dirpath, _dirnames, _filenames in os.walk(root, topdown=False):
        path = Path(dirpath)
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def hook_settings(directory: Path, settings, env=None) -> dict:
    """The Claude Code settings file: the two hooks, run from the campaign's read-only harness copy
    (standard library only: ``-S`` skips site-packages and their start-up cost; ``-B`` writes no caches),
    and the Bash sandbox (``sandbox.settings``), out of which only ``attune`` runs, allowed without a prompt."""
    hooks = directory / ".attune" / "harness" / "hooks"
    python = sys.executable or "python3"
    out = {"hooks": {
        "PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "timeout": 30,
                                                  "command": "%s -B -S %s" % (python, hooks / "pre_tool_use.py")}]}],
        "Stop": [{"hooks": [{"type": "command", "timeout": 120, "command": "%s -B -S %s" % (python, hooks / "stop.py")}]}],
    }}
    out["sandbox"] = sandbox.settings(directory, env)
    # the file tools (Read, Grep, Glob, Edit, Write) run outside the Bash sandbox: every path it denies reading is
    # denied to them too, and /proc (Claude Code's own environment, which holds its API key, is /proc/self/environ)
    out["permissions"] = {"allow": ["Bash(%s:*)" % sandbox.VERB],
                          "deny": sandbox.file_tool_rules(out["sandbox"]["filesystem"]["denyRead"] + ["/proc"])}
    if not settings.allow_web:
        out["permissions"]["deny"] = ["WebFetch", "WebSearch"] + out["permissions"]["deny"]
    return out


def prepare(directory: Path, settings, goal_prompt: Path = None) -> campaign_mod.Campaign:
    """Lay out a new campaign directory (idempotent on an existing one: nothing is overwritten)."""
    directory.mkdir(parents=True, exist_ok=True)
    state = directory / ".attune"
    state.mkdir(exist_ok=True)
    for name, source in (("skill", REPO / "skill"), ("harness", HERE)):
        target = state / name
        if not target.exists():
            shutil.copytree(source, target, ignore=IGNORED)
            # compiled once here, so the hooks (run on every tool call) do not compile their source each time;
            # the integrity record checks these caches against their sources
            compileall.compile_dir(str(target), quiet=1)
            _read_only(target)
    sandbox.write_wrapper(directory, sys.executable or "python3")
    sandbox.ensure_layout(directory)
    link = directory / SKILL_LINK
    if not link.exists() and not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("..") / ".." / ".attune" / "skill")
    campaign = campaign_mod.init(directory, settings)  # copies the lever catalog to levers.md
    for key, name in PROMPTS.items():
        path = directory / name
        if not path.exists():
            source = goal_prompt if key == "goal" and goal_prompt else HERE / "prompts" / name
            shutil.copyfile(source, path)
    settings_path = directory / CLAUDE_SETTINGS
    text = json.dumps(hook_settings(directory, settings), indent=2) + "\n"
    if not settings_path.exists():
        settings_path.write_text(text, encoding="utf-8")
    return campaign


def _teardown_live(directory: Path, settings) -> list:
    from attune.campaign import runs as runs_mod
    campaign = campaign_mod.Campaign(directory)
    done = []
    for run in integrity.live_runs(directory):
        try:
            runs_mod.teardown(campaign, settings, run)
            done.append(run)
        except Exception as exc:  # keep tearing the others down; say which one failed
            print("launch_campaign: teardown of run %s failed: %s" % (run, exc), file=sys.stderr)
    return done


def _violation_exit(directory: Path, settings, problems) -> int:
    integrity.violation(directory, problems)
    torn = _teardown_live(directory, settings)
    first = problems[0]
    print("launch_campaign: integrity violation: %s (%s); no recipe ships from this campaign. Runs torn down: %s"
          % (first.get("what"), first.get("rule"), ", ".join(torn) or "none"), file=sys.stderr)
    return EXIT_INTEGRITY


def _record_session(directory: Path, row: dict) -> None:
    path = directory / campaign_files.SESSIONS
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def agent_command(settings, prompt: str, session: str = None, extra: str = None, directory: Path = None,
                  new_session: str = None) -> list:
    if extra:
        return ["bash", "-c", extra]
    if settings.agent == "planner":
        program = directory / PLANNER
        if not program.is_file():
            raise AttuneError("ATTUNE_AGENT=planner: %s is missing: this campaign's skill copy predates the planner. "
                              "Fix: start a new campaign directory, or ATTUNE_AGENT=claude" % program)
        argv = [sys.executable or "python3", str(program)]
        return argv + (["--session", session] if session else [])
    if settings.agent != "claude":
        raise AttuneError("ATTUNE_AGENT=%s: this agent is not available in this build. Fix: ATTUNE_AGENT=claude, or "
                          "--agent-command CMD" % settings.agent)
    claude = os.environ.get("ATTUNE_CLAUDE_BIN") or shutil.which("claude")
    if not claude:
        raise AttuneError("claude: not found on PATH. Fix: install Claude Code (npm install -g "
                          "@anthropic-ai/claude-code) or set ATTUNE_CLAUDE_BIN")
    argv = [claude, "-p", prompt, "--output-format", "json", "--settings", str(directory / CLAUDE_SETTINGS)]
    if settings.claude_model:
        argv += ["--model", settings.claude_model]
    if session:
        argv += ["--resume", session]
    elif new_session:
        argv += ["--session-id", new_session]
    if not settings.allow_web:
        argv += ["--disallowedTools", "WebFetch,WebSearch"]
    return argv


_STDERR = threading.Lock()  # the planner's copied lines and the launcher's own: whole lines, never interleaved


def _say(text: str) -> None:
    """Write one whole line to stderr (one write, under the lock the copier of the agent's lines holds)."""
    with _STDERR:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        sys.stderr.flush()


def _run_streaming(argv: list, directory: Path, env: dict, stdin) -> subprocess.CompletedProcess:
    """Run ``argv`` with its stderr copied line by line to ours as it comes (and kept); stdout kept."""
    proc = subprocess.Popen(argv, cwd=str(directory), env=env, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    kept = []

    def copy():
        for line in iter(proc.stderr.readline, b""):
            kept.append(line)
            _say(line.decode("utf-8", "replace"))
    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    out = proc.stdout.read()
    code = proc.wait()
    thread.join(timeout=10)
    return subprocess.CompletedProcess(argv, code, out, b"".join(kept))


def run_agent(directory: Path, settings, prompt_file: Path, session: str = None, extra: str = None,
              new_session: str = None) -> dict:
    """One agent session (``session`` resumed, else a new one with id ``new_session``, by default a fresh
    one); returns what the launcher records about it."""
    prompt = prompt_file.read_text(encoding="utf-8")
    new_session = None if session else (new_session or str(uuid.uuid4()))
    argv = agent_command(settings, prompt, session, extra, directory, new_session)
    _RESUME.append(resume_command(directory, session or new_session))
    print("launch_campaign: session %s %s; if it stops before the campaign is over, resume it with: %s"
          % (session or new_session, "resumed" if session else "started", _RESUME[-1]), file=sys.stderr)
    # no bytecode caches written into the read-only tool copies (the integrity record holds their sources)
    env = dict(os.environ, ATTUNE_CAMPAIGN_DIR=str(directory), ATTUNE_PROMPT_FILE=str(prompt_file),
               ATTUNE_SESSION_ID=session or new_session, PYTHONDONTWRITEBYTECODE="1")
    env["PATH"] = sandbox.agent_path(directory, env)  # the campaign's attune first
    started = _now()
    with open(os.devnull, "rb") as devnull:
        if settings.agent == "planner" and not extra:  # its progress lines reach the terminal as they come
            proc = _run_streaming(argv, directory, env, devnull)
        else:
            proc = subprocess.run(argv, cwd=str(directory), env=env, stdin=devnull, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
    out = proc.stdout.decode("utf-8", "replace")
    result = None
    for line in reversed(out.strip().splitlines()):
        try:
            candidate = json.loads(line)
        except ValueError:
            continue
        if isinstance(candidate, dict):
            result = candidate
            break
    if result is None:
        try:
            result = json.loads(out)
        except ValueError:
            result = {}
    sessions = directory / ".attune" / "sessions"
    sessions.mkdir(exist_ok=True)
    sid = result.get("session_id") or session or new_session
    (sessions / ("%s.json" % sid)).write_text(out, encoding="utf-8")
    return {"session": sid, "started": started, "ended": _now(), "exit_code": proc.returncode,
            "model_cost_usd": result.get("total_cost_usd"), "usage": result.get("usage"),
            "end_reason": result.get("terminal_reason") or result.get("subtype"), "is_error": result.get("is_error"),
            "result_empty": (result.get("result") in ("", None)) if result else True,
            "permission_denials": len(result.get("permission_denials") or []),
            "stderr_tail": proc.stderr.decode("utf-8", "replace")[-2000:]}


def _doctor(settings, reuse, agent_cmd: str):
    """``attune doctor``'s checks before anything is laid out or started, the cluster checks in ``reuse``
    (``doctor.cached``) taken as they passed; the report, or None when a check failed (every check's line
    is printed then)."""
    report = doctor_mod.run(settings, agent_command=agent_cmd, reuse=reuse)
    if not report.ok:
        for line in report.lines()[:-1]:
            print("launch_campaign: doctor: %s" % line, file=sys.stderr)
        print("launch_campaign: doctor: failed: %s; nothing was started" % ", ".join(report.failed), file=sys.stderr)
        return None
    for result in report.results:
        if result.status == doctor_mod.WARNING:
            print("launch_campaign: doctor: %s" % result.line(), file=sys.stderr)
    reused = [result.name for result in report.results if result.cached]
    print("launch_campaign: doctor: ok (%d passed, %d skipped%s)" % (
        sum(result.status in (doctor_mod.OK, doctor_mod.WARNING) for result in report.results),
        sum(result.status == doctor_mod.SKIPPED for result in report.results),
        "; %s reused from this session's earlier launch" % ", ".join(reused) if reused else ""), file=sys.stderr)
    return report


def _over(directory: Path, settings_map: dict) -> bool:
    return stop_over(campaign_state(str(directory), settings_map))


def launch(directory: Path, goal_prompt: Path = None, session: str = None, prepare_only: bool = False,
           config=None, agent_cmd: str = None) -> int:
    directory = directory.resolve()
    first = not (directory / campaign_files.SETTINGS).exists()
    if first and session:
        raise InputError("%s: no campaign here (no %s), so there is no session %s to resume. Fix: give the directory "
                         "the campaign runs in, or start a campaign there without --session"
                         % (directory, campaign_files.SETTINGS, session))
    # a later launch (a resume, or the start after --prepare) reads the campaign's frozen settings only
    settings = frozen_mod.for_campaign(directory, config_file=config)
    if not first:
        for line in settings_mod.differences(settings, os.environ, config):
            print("launch_campaign: warning: %s; the campaign keeps the settings it started with (%s)"
                  % (line, directory / campaign_files.SETTINGS), file=sys.stderr)
        problems = integrity.verify(str(directory))
        if problems:
            return _violation_exit(directory, settings, problems)
    # the session this launch runs: the one resumed, or a new one whose id the doctor's cache records
    session_id = None if prepare_only else session or str(uuid.uuid4())
    digest = doctor_mod.fingerprint(settings)
    report = _doctor(settings, doctor_mod.cached(directory, None if first else session, digest), agent_cmd)
    if report is None:
        return EXIT_CHECK_FAILED
    campaign = prepare(directory, settings, goal_prompt)
    rows = report.result("rows").facts.get("rows_sha256")
    if rows:
        campaign.append("note", text="rows_sha256 checked at launch: %s (%s)" % (rows, settings.rows_path))
    if session_id:
        doctor_mod.remember(directory, session_id, digest, report)
    if first:
        integrity.record(str(directory))
    else:
        integrity.reprompt(str(directory))
    if prepare_only:
        print("campaign: %s\nprepared: %s" % (campaign.id, directory))
        return EXIT_OK
    settings_map = campaign_files.read_settings(str(directory))
    prompt = directory / (PROMPTS["resume"] if session else PROMPTS["goal"])
    resumes = 0
    while True:
        integrity.record(str(directory), session=True)
        campaign.append("session", session=session or "new", event="start",
                        agent="command" if agent_cmd else settings.agent)
        info = run_agent(directory, settings, prompt, session, agent_cmd, new_session=session_id)
        _record_session(directory, info)
        end = {"session": info["session"], "event": "end", "agent": "command" if agent_cmd else settings.agent,
               "exit_code": info["exit_code"], "detail": str(info["end_reason"])}
        if isinstance(info["model_cost_usd"], (int, float)):
            end["model_cost_usd"] = float(info["model_cost_usd"])
        problems = integrity.verify(str(directory))
        if problems:
            return _violation_exit(directory, settings, problems)
        campaign.append("session", **end)
        if _over(directory, settings_map):
            print("campaign: %s\nfinished: yes\nsession: %s\nresume: %s"
                  % (campaign.id, info["session"], resume_command(directory, info["session"])))
            return EXIT_OK
        if settings.agent == "planner" and not agent_cmd:
            # The planner calls no hooks: the Stop hook's rule is checked here, after it exits, and a planner that
            # ended cleanly while the rule does not hold is resumed, at most MAX_CAP_RESUMES times.
            allow, reason = stop_decide(str(directory), settings_map)
            if not allow and info["exit_code"] == 0 and resumes < MAX_CAP_RESUMES:
                resumes += 1
                session, prompt = info["session"], directory / PROMPTS["resume"]
                print("launch_campaign: the planner ended but the stop rule does not hold (%s); resuming %s (%d of %d)"
                      % (reason, session, resumes, MAX_CAP_RESUMES), file=sys.stderr)
                continue
        capped = info["exit_code"] == 0 and not info["is_error"] and info["result_empty"]
        if capped and resumes < MAX_CAP_RESUMES:
            resumes += 1
            session, prompt = info["session"], directory / PROMPTS["resume"]
            print("launch_campaign: the session ended without finishing (Stop-hook block cap); resuming %s (%d of %d)"
                  % (session, resumes, MAX_CAP_RESUMES), file=sys.stderr)
            continue
        if info["exit_code"] in (130, -2):  # Ctrl-C reached the agent (the terminal signals the whole group) before
            raise KeyboardInterrupt            # the launcher saw it: the launch ends as interrupted, whichever was first
        print("launch_campaign: the agent ended (exit %s, %s) before the campaign finished. Resume with: %s"
              % (info["exit_code"], info["end_reason"], resume_command(directory, info["session"])), file=sys.stderr)
        return EXIT_CHECK_FAILED


def resume_command(directory: Path, session: str) -> str:
    """The command that resumes ``session`` of the campaign in ``directory``, runnable from anywhere as printed."""
    import shlex

    return " ".join(shlex.quote(str(word)) for word in (HERE / "launch_campaign.sh", directory, "--session", session))


def demo(directory: Path, model: str, budget_gpuh: float = None, in_flight: int = None) -> int:
    """The demo campaign (``demo.py``): lay it out, run it with the planner, say where its results are.
    ``model`` ``real`` is the real demo: Megatron-LM's own pretrain_gpt.py on this host's CPU."""
    import demo as demo_mod

    try:
        if model == "real":
            config = demo_mod.prepare_real(directory, budget_gpuh)
        else:
            config = demo_mod.prepare(directory, model, budget_gpuh, in_flight)
    except ValueError as exc:
        print("launch_campaign: %s" % exc, file=sys.stderr)
        return EXIT_USAGE
    for name in list(os.environ):  # the demo's settings are its config.env, whatever this shell exports
        if name in settings_mod.SPEC_BY_ENV:
            del os.environ[name]
    if model == "real":
        print("launch_campaign: the ATTUNE real demo (cpu: Megatron-LM's own pretrain_gpt.py training a tiny GPT on "
              "this host's CPU, about 40 s a run) in %s" % directory.resolve(), file=sys.stderr)
    else:
        print("launch_campaign: the ATTUNE demo (SIMULATED: %s) in %s" % (demo_mod.MODELS[model][2],
                                                                         directory.resolve()), file=sys.stderr)
    code = launch(directory, config=config)
    print("campaign_dir: %s" % directory.resolve())
    for name in ("RESULTS.md", "REPORT.md", "recipe.yaml", "levers.md", "past_tuning_project.json"):
        path = directory.resolve() / name
        if path.exists():
            print("%s: %s" % (name, path))
    return code


USAGE = """Start or resume an ATTUNE campaign, or run the SIMULATED demo campaign on this machine.

  harness/launch_campaign.sh CAMPAIGN_DIR [GOAL_PROMPT] [--session ID] [--prepare] [--config FILE]
                             [--agent-command CMD]
  harness/launch_campaign.sh --demo [CAMPAIGN_DIR] [--demo-model MODEL] [--demo-budget GPUH] [--demo-in-flight K]
  harness/launch_campaign.sh --demo-real [CAMPAIGN_DIR] [--demo-budget GPUH]"""
EXIT_CODES = """exit codes: 0 finished (budget spent or stop recorded, and REPORT.md written); 1 the agent
ended early (resumable with --session); 2 bad settings or usage; 3 integrity violation (every live
run torn down)."""


def campaign_parser() -> argparse.ArgumentParser:
    """The options of a campaign launch (the first form of ``USAGE``)."""
    parser = argparse.ArgumentParser(prog="launch_campaign.sh", add_help=False,
                                     description="Start or resume a campaign.")
    parser.add_argument("campaign_dir", metavar="CAMPAIGN_DIR",
                        help="the campaign directory: laid out on the first launch, resumed after")
    parser.add_argument("goal_prompt", metavar="GOAL_PROMPT", nargs="?",
                        help="a file with the goal prompt (default: the harness's own, harness/prompts/)")
    parser.add_argument("--session", metavar="ID", help="resume this agent session with the resume prompt")
    parser.add_argument("--prepare", action="store_true", help="prepare and record integrity; start no agent")
    parser.add_argument("--config", metavar="FILE", help="a config.env to read the settings from (first launch)")
    parser.add_argument("--agent-command", metavar="CMD",
                        help="run this shell command as the agent instead of the one ATTUNE_AGENT names")
    parser.add_argument("-h", "--help", action="store_true", help="show this help (both forms) and exit")
    return parser


def demo_parser() -> argparse.ArgumentParser:
    """The options of ``--demo`` (the second form of ``USAGE``)."""
    import demo as demo_mod

    parser = argparse.ArgumentParser(prog="launch_campaign.sh --demo", add_help=False,
                                     description="The SIMULATED demo campaign, on this machine.")
    parser.add_argument("campaign_dir", metavar="CAMPAIGN_DIR", nargs="?", default=None,
                        help="where (default: a new temporary directory, printed)")
    parser.add_argument("--demo-model", metavar="MODEL", default="llama3-70b", choices=sorted(demo_mod.MODELS),
                        help="%s; default llama3-70b" % "; ".join(
                            "%s: %s" % (name, what) for name, (_t, _b, what) in sorted(demo_mod.MODELS.items())))
    parser.add_argument("--demo-budget", type=float, metavar="GPUH",
                        help="the budget in simulated GPU-hours (default: the model's, %s)" % ", ".join(
                            "%g for %s" % (budget, name) for name, (_t, budget, _w) in sorted(demo_mod.MODELS.items())))
    parser.add_argument("--demo-in-flight", type=int, metavar="K",
                        help="ATTUNE_MAX_IN_FLIGHT: up to K one-lever candidates against the same leader at once "
                             "(default 1)")
    parser.add_argument("-h", "--help", action="store_true", help="show this help (both forms) and exit")
    return parser


def demo_real_parser() -> argparse.ArgumentParser:
    """The options of ``--demo-real`` (the third form of ``USAGE``)."""
    import demo as demo_mod

    parser = argparse.ArgumentParser(
        prog="launch_campaign.sh --demo-real", add_help=False,
        description="A real campaign on this machine: Megatron-LM's own pretrain_gpt.py on the CPU (runs marked "
                    "cpu). Megatron-LM comes from ATTUNE_MEGATRON_DIR (a checkout), ATTUNE_MEGATRON_ARCHIVE (a git "
                    "archive tarball) or ATTUNE_CORPUS_DIR's megatron-lm/ archive, unpacked into ATTUNE_CACHE_DIR.")
    parser.add_argument("campaign_dir", metavar="CAMPAIGN_DIR", nargs="?", default=None,
                        help="where (default: a new temporary directory, printed)")
    parser.add_argument("--demo-budget", type=float, metavar="GPUH",
                        help="the budget in rank-hours, a rank standing for a GPU (default %g)"
                        % demo_mod.REAL_BUDGET_GPUH)
    parser.add_argument("-h", "--help", action="store_true", help="show this help (all forms) and exit")
    return parser


def help_text() -> str:
    """``--help``: both forms and every option of each, plain text."""
    sections = [USAGE]
    for parser in (campaign_parser(), demo_parser(), demo_real_parser()):
        body = parser.format_help().split("\n\n", 1)[1]  # drop argparse's own usage line
        sections.append("%s: %s" % (parser.prog, body.strip()))
    sections.append(EXIT_CODES)
    return "\n\n".join(sections) + "\n"


def _parse(parser, argv):
    """``(args, None)``, or ``(None, exit code)`` after a usage error (argparse printed it) or ``--help``."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return None, int(exc.code or 0) and EXIT_USAGE
    if args.help:
        sys.stdout.write(help_text())
        return None, EXIT_OK
    return args, None


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] in ("--demo", "--demo-real"):
        real = argv[0] == "--demo-real"
        args, code = _parse(demo_real_parser() if real else demo_parser(), argv[1:])
        if args is None:
            return code
        directory = args.campaign_dir
        if directory is None:
            directory = tempfile.mkdtemp(prefix="attune-demo-real-" if real else "attune-demo-")
            print("launch_campaign: no directory given: the demo runs in a new temporary directory, %s" % directory,
                  file=sys.stderr)
        try:
            return demo(Path(directory), "real" if real else args.demo_model, args.demo_budget,
                        None if real else args.demo_in_flight)
        except AttuneError as exc:
            for line in exc.lines():
                print("launch_campaign: %s" % line, file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            return _interrupted()
    if not argv:
        sys.stderr.write(help_text())
        return EXIT_USAGE
    if "-h" in argv or "--help" in argv:  # before parsing: CAMPAIGN_DIR is not needed for it
        sys.stdout.write(help_text())
        return EXIT_OK
    args, code = _parse(campaign_parser(), argv)
    if args is None:
        return code
    goal = Path(args.goal_prompt) if args.goal_prompt else None
    if goal is not None and not goal.is_file():
        print("launch_campaign: %s: no such goal prompt file" % goal, file=sys.stderr)
        return EXIT_USAGE
    try:
        return launch(Path(args.campaign_dir), goal, args.session, args.prepare, args.config, args.agent_command)
    except AttuneError as exc:
        for line in exc.lines():
            print("launch_campaign: %s" % line, file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return _interrupted()


def _interrupted() -> int:
    """Ctrl-C: say how to go on (the runs in flight keep running; the resumed session follows them)."""
    how = ("resume with: %s" % _RESUME[-1]) if _RESUME else "no session had started"
    _say("launch_campaign: interrupted; the runs in flight go on and a resumed session follows them; %s" % how)
    return 130


if __name__ == "__main__":
    raise SystemExit(main())
