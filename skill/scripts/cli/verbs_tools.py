"""The verbs that read artifacts: metrics (a log), gate (two runs), profile (traces), rows (training rows)."""

from __future__ import annotations

import sys
from pathlib import Path

from attune.campaign import ledger as campaign_mod
from attune.core import frozen as frozen_mod
from attune.core.errors import EXIT_CHECK_FAILED, EXIT_OK, CheckFailed, InputError

from .base import campaign_dir, campaign_settings, check_config, emit, subcommands, verb


def _metrics_arguments(p) -> None:
    p.add_argument("log", metavar="LOG", help="the log file (any size: it is read in chunks, and what is "
                                              "kept of it is bounded)")
    p.add_argument("--exit-code", type=int, help="the run's exit code, for failure triage")
    p.add_argument("--complete", action="store_true",
                   help="the run has ended: also read a last line without its newline (by default that is "
                        "a line still being written, and is held back), all but its last field, which may "
                        "have been cut")
    p.add_argument("--steps", metavar="A:B",
                   help="print the steps numbered A to B (A: or :B for open ends) in full, every one of them; "
                        "without it, --json holds the steps kept in full (all of a short run)")


@verb("metrics", "parse a training log (Megatron-LM, Megatron-Bridge, Megatron-DeepSpeed, NeMo, slime) into a "
                 "summary of its steps, memory, timers, slime records, failures and crash lines, in bounded memory "
                 "at any size (exit 2 for a file that is empty, mostly binary, or holds no record and no failure; "
                 "stray bytes in a log are replaced)", arguments=_metrics_arguments, config=False)
def cmd_metrics(args) -> int:
    from attune.campaign import logview  # imported where used: status and rank start faster without it
    logview.show(Path(args.log), args.exit_code, args.complete, logview.step_range(args.steps), args.json,
                 sys.stdout)
    return EXIT_OK


def _gate_arguments(p) -> None:
    p.add_argument("--run", help="a finalized run of the campaign: gated against the campaign's baseline, "
                                 "with gate.json and a ledger row written")
    p.add_argument("--baseline", metavar="DIR", help="the baseline's run directory (recipe.yaml or "
                                                     "local.json, and log.txt)")
    p.add_argument("--candidate", metavar="DIR", help="the candidate's run directory")
    p.add_argument("--repeat", action="append", metavar="DIR",
                   help="another run of the baseline's recipe: what a legitimate rerun shows (repeatable)")
    p.add_argument("--steps", metavar="FIRST:LAST", help="the steps compared (1:20)")
    p.add_argument("--rules", metavar="FILE",
                   help="your overrides of the argument classes (default: the ATTUNE_GATE_RULES setting)")
    p.add_argument("--coverage", metavar="DIR",
                   help="a Megatron-LM or slime checkout: list the arguments it defines that the rules do not "
                        "class (exit 1 when any); reading Megatron-LM's needs the packages it imports (torch)")


@verb("gate", "the correctness gate: is the candidate's configuration legal and does its loss follow the "
              "baseline's (exit 1 when it fails)", arguments=_gate_arguments)
def cmd_gate(args) -> int:
    from attune.correctness import gate as gate_mod
    from attune.correctness.rules import Rules
    if args.coverage:
        if args.run or args.baseline or args.candidate:
            raise InputError("--coverage reads a checkout's argument definitions; it gates no run. Fix: give "
                             "--coverage alone, or --run / --baseline and --candidate without it")
        return _gate_coverage(args, Rules(overrides=args.rules or None))
    steps = _steps(args.steps)
    if args.run:
        if args.baseline or args.candidate:
            raise InputError("--run gates a campaign's run against its baseline; --baseline and --candidate are "
                             "for run directories outside a campaign. Fix: give one or the other")
        campaign = campaign_mod.Campaign(campaign_dir(args))
        if args.rules:
            raise InputError("--rules %s: a campaign's gate runs on its frozen rules (ATTUNE_GATE_RULES), so that "
                             "every verdict of the campaign is judged alike. Fix: drop --rules" % args.rules)
        runs_dir = (campaign.dir / "runs").resolve()
        for repeat in args.repeat or ():
            if Path(repeat).resolve().parent != runs_dir:
                raise InputError("--repeat %s: not a run of this campaign (runs/RUN); a campaign's gate calibrates "
                                 "on the campaign's own reruns of its baseline. Fix: name runs/RUN" % repeat)
        result = gate_mod.gate_campaign_run(campaign, campaign_settings(args, campaign), args.run, args.repeat or (), steps)
    else:
        if not (args.baseline and args.candidate):
            raise InputError("give --run RUN (a campaign's run) or both --baseline DIR and --candidate DIR")
        check_config(args)
        result = gate_mod.run_gate(args.baseline, args.candidate, args.repeat or (), steps,
                                   Rules(overrides=args.rules or None))
    emit(args, result, gate_mod.text(result))
    return EXIT_OK if result["verdict"] == "pass" else EXIT_CHECK_FAILED


def _gate_coverage(args, rules) -> int:
    """The arguments a Megatron-LM or slime checkout defines that no rule classes (exit 1 when any)."""
    from attune.correctness import inventory
    root = Path(args.coverage)
    if (root / "megatron" / "training" / "arguments.py").is_file():
        stack = "megatron"
    elif (root / "slime").is_dir():
        stack = "slime"
    else:
        raise InputError("%s: neither a Megatron-LM checkout (megatron/training/arguments.py) nor a slime checkout "
                         "(slime/). Fix: give the folder that holds megatron/ or slime/" % root)
    try:
        names = inventory.read_arguments(stack, root)
    except inventory.InventoryError as exc:
        raise InputError(str(exc))
    missing = inventory.unclassed(rules, names)
    result = {"checkout": str(root), "stack": stack, "arguments": len(names), "unclassed": missing,
              "rules": rules.path, "overrides": rules.overrides_path}
    lines = ["%s checkout %s: %d arguments, %d without a class in the gate's rules%s" % (
        stack, root, len(names), len(missing), " (they count as numeric)" if missing else "")]
    lines += ["unclassed: %s" % name for name in missing]
    if missing:
        lines.append("fix: class each for a campaign in an overrides file (ATTUNE_GATE_RULES; "
                     "correctness/rules/README.md), with its reason, source and justification")
    emit(args, result, "\n".join(lines))
    return EXIT_CHECK_FAILED if missing else EXIT_OK


def _profile_arguments(p) -> None:
    p.add_argument("traces", nargs="*", metavar="TRACE", help="trace files (.json or .json.gz), or folders of them")
    p.add_argument("--run", help="a run of the campaign launched through the profiler hook (--profile-of): "
                                 "its traces, fetched through the log pod on KubeRay, and its recipe")
    p.add_argument("--steps", metavar="A:B", help="only ProfilerStep#A to #B")
    p.add_argument("--partial", action="store_true",
                   help="analyze a trace that ends early (cut short) up to the cut, marked PARTIAL, instead of "
                        "refusing it (exit 2)")
    p.add_argument("--recipe", metavar="FILE",
                   help="the run's recipe (RayJob YAML or local.json): parallel layout and micro-batches")
    p.add_argument("--diff", nargs=2, metavar="TRACE",
                   help="compare two runs, A then B, each a trace file or a folder of per-rank traces: step "
                        "time, GPU time breakdown, exposed communication per collective, top kernels, "
                        "launches and idle, per ProfilerStep, with the three largest differences explained")


def _diagnose_arguments(p) -> None:
    p.add_argument("run", metavar="RUN", help="a launched run of the campaign (the leader, usually)")
    p.add_argument("--gpu", help="GPU model for the projection (h100, b200, ...; default: the recipe's "
                                 "ATTUNE_SIM_HARDWARE)")


@verb("diagnose", "what bounds a run's step time, from the profile, the log's timers, the projection's breakdown, "
                  "the triage history and the catalog, in that order; says which sources it had",
      arguments=_diagnose_arguments)
def cmd_diagnose(args) -> int:
    from . import diagnose as diagnose_mod
    campaign = campaign_mod.Campaign(campaign_dir(args))
    campaign.require_ledger()
    result = diagnose_mod.diagnose(campaign, campaign_settings(args, campaign), args.run, args.gpu)
    emit(args, result, diagnose_mod.text(result))
    return EXIT_OK


@verb("profile", "analyze torch.profiler traces: step time, GPU time breakdown, exposed communication, bubbles, "
                 "launch overhead, memory, stragglers, and a ranked diagnosis (exit 2 for a file that is not a trace, "
                 "or traces without an event; a trace cut short gives a partial result); --diff A B compares two "
                 "runs' traces per step and explains the three largest differences", arguments=_profile_arguments)
def cmd_profile(args) -> int:
    from attune.profile_analyzer import profile as profile_mod
    if args.diff:
        return _profile_diff(args)
    steps = _steps(args.steps) if args.steps else None
    traces, recipe = args.traces, args.recipe
    if args.run:
        from attune.campaign import runs as runs_mod
        campaign = campaign_mod.Campaign(campaign_dir(args))
        traces = [str(path) for path in runs_mod.traces(campaign, campaign_settings(args, campaign), args.run)] + traces
        recipe = recipe or str(campaign.run_dir(args.run) / "recipe.yaml")
    else:
        check_config(args)
    if not traces:
        raise InputError("no traces: give trace files or folders, or --run RUN for a run launched with --profile-of")
    result = profile_mod.run(traces, steps, recipe, partial=args.partial)
    agg = result["aggregate"]
    lines = ["traces: %d file(s), %d rank(s)%s" % (len(result["files"]), agg["ranks"],
                                                  " (PARTIAL: a file ended early)" if result["partial"] else "")]
    for r in result["ranks"]:
        tb, comm = r["temporal_breakdown"], r["communication"]
        lines.append("rank %d: idle %s%% compute %s%% non-compute %s%% overlap %s%% exposed comm %.0f us of %.0f us" % (
            r["rank"], tb["idle_pctg"], tb["compute_pctg"], tb["non_compute_pctg"], comm["overlap_pctg"],
            comm["exposed_us"], tb["kernel_time_us"]))
    if agg.get("step_time_us"):
        lines.append("step_time_us: %s" % ", ".join("#%s %.0f" % item for item in agg["step_time_us"].items()))
    for item in result["diagnosis"]:
        lines.append("bottleneck: %s %.1f%% of GPU time (%s)" % (item["bottleneck"], item["share"] * 100,
                                                                 item["family"]))
        lines.append("  evidence: %s" % item["evidence_text"])
        lines.append("  levers: %s" % (", ".join(item["levers"]) or "none in the catalog"))
    if not result["diagnosis"]:
        lines.append("bottleneck: none above %.0f%% of GPU time" % 2)
    for fact in result.get("facts") or []:
        lines.append("fact: %s%s" % (fact["text"], " (levers: %s)" % ", ".join(fact["levers"]) if fact["levers"]
                                     else ""))
    lines += ["warning: %s" % warning for warning in result["warnings"]]
    emit(args, result, "\n".join(lines))
    return EXIT_OK


def _profile_diff(args) -> int:
    """``attune profile --diff A B``: each side profiled alone, then compared (profile_analyzer/diff.py)."""
    from attune.profile_analyzer import diff as diff_mod, profile as profile_mod
    if args.traces or args.run or args.recipe:
        raise InputError("--diff A B compares two traces (or folders of per-rank traces) alone: drop %s" % (
            "the other traces %s" % " ".join(args.traces) if args.traces else "--run" if args.run else "--recipe"))
    check_config(args)
    steps = _steps(args.steps) if args.steps else None
    results = []
    for name, side in zip("AB", args.diff):
        try:
            results.append(profile_mod.run([side], steps, partial=args.partial))
        except InputError as exc:
            raise InputError("--diff %s: %s" % (name, exc))
    result = diff_mod.diff(*results)
    emit(args, result, diff_mod.render(result))
    return EXIT_OK


def _steps(text):
    if not text:
        return None  # the gate's default: steps 1 to 20, or every step of a slime run
    try:
        first, last = (int(part) for part in text.split(":"))
    except ValueError:
        first = last = None
    if first is None or not 1 <= first < last:
        raise InputError("--steps %s: expected FIRST:LAST with 1 <= FIRST < LAST, e.g. 1:20" % text)
    return first, last


def _rows_build_arguments(p) -> None:
    p.add_argument("--input", required=True, metavar="FILE",
                   help="records, .jsonl or .parquet (messages, or prompt/response)")
    p.add_argument("--tokenizer", required=True, metavar="DIR", help="a local Hugging Face tokenizer directory")
    p.add_argument("--seq-length", required=True, type=int, metavar="N", help="the workload's sequence length")
    p.add_argument("--out", required=True, metavar="OUT", help="the rows file to write (.parquet)")
    p.add_argument("--overlong", choices=["drop", "truncate"], default="drop",
                   help="what to do with a record longer than a row (default drop; both are counted)")


def _rows_build(args) -> int:
    from attune.data import rows as rows_mod  # imported where used: pyarrow and transformers are heavy
    summary = rows_mod.build(args.input, args.tokenizer, args.seq_length, args.out, args.overlong,
                             log=lambda text: print("attune rows: %s" % text, file=sys.stderr))
    counts = summary["counts"]
    lines = ["out: %s" % summary["out"], "tokenizer: %s" % summary["tokenizer"],
             "tokenizer_sha256: %s" % summary["tokenizer_sha256"], "seq_length: %d" % summary["seq_length"],
             "overlong: %s" % summary["overlong"]]
    lines += ["%s: %s" % item for item in sorted(counts.items())]
    lines += ["packing_efficiency: %.4f" % summary["packing_efficiency"], "seconds: %.3f" % summary["seconds"],
              "tokens_per_s: %.1f" % summary["tokens_per_s"], "rows_sha256: %s" % summary["rows_sha256"]]
    emit(args, summary, "\n".join(lines))
    return EXIT_OK


def _rows_from_slime_arguments(p) -> None:
    p.add_argument("file", nargs="+", metavar="FILE",
                   help="the dumps: .pt files slime's --save-debug-rollout-data wrote, or their template with "
                        "{rollout_id}")
    p.add_argument("--out", required=True, metavar="OUT", help="the rows file to write (.parquet)")
    p.add_argument("--seq-length", type=int, metavar="N",
                   help="the row length (default: the longest sample rounded up to a multiple of 128)")
    p.add_argument("--vocab-size", type=int, metavar="V", help="the model's vocabulary size, checked and recorded")
    p.add_argument("--pad-token-id", type=int, default=0, metavar="P",
                   help="the token that fills a row after its last sample (default 0)")


def _rows_from_slime(args) -> int:
    from attune.data import rollout as rollout_mod  # imported where used: torch is heavy
    summary = rollout_mod.from_slime(args.file, args.out, args.seq_length, args.vocab_size, args.pad_token_id)
    lines = ["out: %s" % summary["out"], "source: %s" % summary["source"],
             "rollout_ids: %s" % " ".join(map(str, summary["rollouts"])), "seq_length: %d" % summary["seq_length"]]
    lines += ["%s: %s" % item for item in sorted(summary["counts"].items())]
    lines.append("rows_sha256: %s" % summary["rows_sha256"])
    emit(args, summary, "\n".join(lines))
    return EXIT_OK


def _rows_to_slime_arguments(p) -> None:
    p.add_argument("file", metavar="FILE", help="the rows file (.parquet)")
    p.add_argument("--out", required=True, metavar="OUT", help="the folder to write the dump to")


def _rows_to_slime(args) -> int:
    from attune.data import rollout as rollout_mod
    summary = rollout_mod.to_slime(args.file, args.out)
    lines = ["out: %s" % summary["out"], "manifest: %s" % summary["manifest"],
             "rollout_ids: %s" % " ".join(map(str, summary["rollouts"])), "samples: %d" % summary["samples"],
             "seq_length: %d" % summary["seq_length"], "rows_sha256: %s" % summary["rows_sha256"],
             "launch: %s" % summary["launch"]]
    if summary["missing_rollouts"]:
        lines.append("note: no rollout %s in the rows: slime reads every id from --start-rollout-id to "
                     "--num-rollout - 1" % ", ".join(map(str, summary["missing_rollouts"])))
    emit(args, summary, "\n".join(lines))
    return EXIT_OK


def _rows_file_argument(p) -> None:
    p.add_argument("file", metavar="FILE", help="the rows file (.parquet) or a dump's attune_dump.json")


def _rows_sha(args) -> int:
    from attune.data import rollout as rollout_mod, rows as rows_mod
    sha, meta = (rollout_mod.dump_sha256 if rollout_mod.is_manifest(args.file) else rows_mod.rows_sha256)(args.file)
    emit(args, {"file": args.file, "rows_sha256": sha, "seq_length": meta["seq_length"]},
         "file: %s\nrows_sha256: %s" % (args.file, sha))
    return EXIT_OK


def _rows_check_arguments(p) -> None:
    _rows_file_argument(p)
    p.add_argument("--seq-length", type=int, metavar="N", help="the expected row length (default: the file's)")
    p.add_argument("--vocab-size", type=int, metavar="V",
                   help="token ids must be below V (default: the one recorded in the file)")
    p.add_argument("--expect-sha", metavar="HEX",
                   help="the expected rows_sha256 (default: the campaign's ATTUNE_ROWS_SHA256)")


def _rows_check(args) -> int:
    from attune.data import check as check_mod, rollout as rollout_mod
    path = args.file
    expect, source = args.expect_sha, "--expect-sha"
    frozen = frozen_mod.frozen_path(campaign_dir(args))
    if expect is None and frozen.exists():
        expect = frozen_mod.for_campaign(campaign_dir(args)).rows_sha256 or None
        source = "ATTUNE_ROWS_SHA256 in %s" % frozen
    if rollout_mod.is_manifest(path):
        result = check_mod.check_dump(path, args.seq_length, expect, source)
    else:
        result = check_mod.check(path, args.seq_length, args.vocab_size, expect, source)
    lines = ["file: %s" % result["file"], "rows: %d" % result["rows"], "seq_length: %d" % result["seq_length"],
             "vocab_size: %s" % result["vocab_size"], "rows_sha256: %s" % result["rows_sha256"],
             "expected_sha256: %s" % ("%s (%s)" % (expect, source) if expect else "none given")]
    lines += ["note: %s" % line for line in result["notes"]]
    lines += ["problem: %s" % line for line in result["problems"]]
    lines.append("ok: %s" % ("yes" if result["ok"] else "no"))
    emit(args, result, "\n".join(lines))
    if not result["ok"]:
        raise CheckFailed("%s: %d problem(s), listed on stdout; the first: %s"
                          % (path, result["problem_count"], result["problems"][0]))
    return EXIT_OK


ROWS = {
    "build": ("write rows: records and a tokenizer to a Parquet file of fixed-length rows", _rows_build_arguments,
              _rows_build),
    "from-slime": ("slime rollout dumps to rows", _rows_from_slime_arguments, _rows_from_slime),
    "to-slime": ("rows to a slime rollout dump (for --load-debug-rollout-data)", _rows_to_slime_arguments,
                 _rows_to_slime),
    "sha": ("print the rows' canonical rows_sha256", _rows_file_argument, _rows_sha),
    "check": ("verify a rows file: lengths, dtypes, ids, masks, boundaries and the hash (exit 1 naming each "
              "problem's row and field)", _rows_check_arguments, _rows_check),
}


@verb("rows", "the fixed-length training rows: build (records and a tokenizer to Parquet), from-slime / to-slime "
              "(slime rollout dumps to rows and back), sha (print rows_sha256), check (lengths, dtypes, ids, masks, "
              "boundaries and the hash; exit 1 naming each problem's row and field)",
      arguments=lambda p: subcommands(p, ROWS), config=False)
def cmd_rows(args) -> int:
    return args.handler(args)
