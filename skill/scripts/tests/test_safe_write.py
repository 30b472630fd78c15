"""No verb writes through a symbolic link, tested as the agent would attack it.

The agent can create files beside most records a verb writes, and the verbs run with the user's rights
outside its sandbox. So each test builds a real campaign, gives it a fake home (``.bashrc``, ``.profile``,
``.kube/config`` with known bytes, and an ``.ssh`` folder whose ``authorized_keys`` does not exist yet),
plants links into that home (a) at every temporary name the verbs used to write through (``X.tmp``,
``X.tmp-<pid>``, ``progress.json.tmp``, ``results_throughput.tmp.png``, ...) and (b) at the record itself,
runs the verb, and checks by effect: no byte of the home changed, no file appeared there, every planted
link still points where it pointed, and a verb asked to write to a link exits 2 naming it.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import types
from pathlib import Path

import pytest
from conftest import DATA
from factory import Builder, settings as make_settings

from attune import cli
from attune.campaign import backends, doctor, ledger as campaign_mod, raybackend
from attune.core import files, levers
from attune.core.chainlog import ChainLog
from attune.core.errors import EXIT_OK, EXIT_USAGE, InputError

HOME_FILES = {".bashrc": b"# the user's shell start-up: known bytes\nexport PATH=$HOME/bin:$PATH\n",
              ".profile": b"# the user's login profile: known bytes\n",
              ".kube/config": b"apiVersion: v1\nkind: Config\ncurrent-context: prod\n"}
MISSING = ".ssh/authorized_keys"  # what an attacker would like created
# the process ids an old writer could have used: this process's own and its neighbours
PIDS = sorted({os.getpid() + step for step in range(-3, 4)} - {0})


class Home(object):
    """A fake home holding known bytes; ``unchanged`` says whether anything in it changed."""

    def __init__(self, root: Path):
        self.root = root
        for name, data in HOME_FILES.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        (root / ".ssh").mkdir()
        self.before = self.state()

    def targets(self) -> list:
        return [self.root / name for name in HOME_FILES] + [self.root / MISSING]

    def state(self) -> dict:
        return {str(p.relative_to(self.root)): (p.read_bytes() if p.is_file() else "dir")
                for p in sorted(self.root.rglob("*"))}

    def unchanged(self) -> None:
        assert self.state() == self.before, "a verb wrote into the home folder"

    def add(self, name: str, data: bytes) -> Path:
        """A further home file (counted as known bytes from now on)."""
        (self.root / name).write_bytes(data)
        self.before = self.state()
        return self.root / name


@pytest.fixture
def home(tmp_path, monkeypatch):
    made = Home(tmp_path / "home")
    monkeypatch.setenv("HOME", str(made.root))
    for cache in ("MPLCONFIGDIR", "XDG_CACHE_HOME"):  # matplotlib's font cache is no verb's write
        monkeypatch.setenv(cache, str(tmp_path / "cache"))
    return made


@pytest.fixture
def in_caller(monkeypatch):
    """Background work (the view cache, the chart) done in this process, so that ``X.tmp-<pid>`` with this process's
    id is exactly the name an old writer used (a forked child's id is not known ahead)."""
    from attune.campaign import background

    def refuse():
        raise OSError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(background.os, "fork", refuse)


def plant(folder: Path, names, home: Home) -> dict:
    """A symbolic link at each of ``names`` in ``folder``, into the home by turns; ``{link: target}``."""
    links = {}
    folder.mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(names):
        target = str(home.targets()[index % len(home.targets())])
        os.symlink(target, str(folder / name))
        links[folder / name] = target
    return links


def intact(links: dict) -> None:
    for link, target in links.items():
        assert os.path.islink(str(link)) and os.readlink(str(link)) == target, "%s was moved or replaced" % link


def pid_names(*names) -> list:
    """``X.tmp-<pid>``: the name ``atomic_write``, the ledger head and the view cache used."""
    return ["%s.tmp-%d" % (name, pid) for name in names for pid in PIDS]


def refused(err: str, path: Path) -> None:
    assert str(path) in err and "is a symbolic link" in err and "remove the link" in err, err
    assert len(err.strip().splitlines()) == 1, err


def basic(tmp_path) -> Path:
    """A copy of the SYNTHETIC ``campaign_basic`` (10 runs, a gated leader)."""
    target = tmp_path / "campaign"
    shutil.copytree(str(DATA / "campaign_basic"), str(target))
    return target


def plant_ledger_temporaries(campaign: Path, home: Home) -> dict:
    """Links where the logs' heads and the view caches were written first, as every ledger verb writes them."""
    links = plant(campaign, pid_names("ledger.jsonl.head", "gpu_hours.jsonl.head"), home)
    links.update(plant(campaign / ".attune" / "cache", pid_names("ledger-view.json", "gpu-hours-view.json"), home))
    return links


# ------------------------------------------------------------------------------------------- the writer
def test_a_link_at_the_final_path_is_refused_and_nothing_written(tmp_path, home):
    for target in (home.root / ".bashrc", home.root / MISSING):
        link = tmp_path / ("record-%s" % target.name)
        os.symlink(str(target), str(link))
        for write in (lambda: files.atomic_write(link, b"x"), lambda: files.write_text(link, "x"),
                      lambda: files.append(link, b"x")):
            with pytest.raises(files.LinkRefused) as caught:
                write()
            assert isinstance(caught.value, InputError) and caught.value.exit_code == EXIT_USAGE
            refused(str(caught.value), link)
            assert str(target) in str(caught.value)
        assert os.readlink(str(link)) == str(target)
    home.unchanged()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "record-.bashrc", "record-authorized_keys"]


def test_append_does_not_follow_a_link_planted_after_its_check(tmp_path, home, monkeypatch):
    """O_NOFOLLOW holds even when the link appears between the check and the open."""
    link = tmp_path / "levers.md"
    os.symlink(str(home.root / ".bashrc"), str(link))
    real = files.refuse_link
    calls = []

    def late(path):  # the first check sees no link, as if the agent planted it a moment later
        calls.append(path)
        if len(calls) > 1:
            real(path)
    monkeypatch.setattr(files, "refuse_link", late)
    with pytest.raises(files.LinkRefused):
        files.append(link, b"appended\n")
    home.unchanged()


def test_replace_refuses_a_link_at_either_end(tmp_path, home):
    source, target = tmp_path / "recipe.yaml", tmp_path / "recipe.yaml.withdrawn"
    source.write_text("kind: RayJob\n")
    os.symlink(str(home.root / ".profile"), str(target))
    with pytest.raises(files.LinkRefused):
        files.replace(source, target)
    assert source.read_text() == "kind: RayJob\n"
    home.unchanged()


def test_the_temporary_file_is_gone_after_a_failure(tmp_path, monkeypatch):
    path = tmp_path / "RESULTS.md"
    path.write_bytes(b"before\n")
    with pytest.raises(RuntimeError):
        with files.replacing(path) as handle:
            handle.write(b"half of it")
            raise RuntimeError("the writer failed")
    assert os.listdir(str(tmp_path)) == ["RESULTS.md"] and path.read_bytes() == b"before\n"

    def no_sync(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", no_sync)
    with pytest.raises(OSError):
        files.atomic_write(path, b"after\n")
    monkeypatch.undo()
    (tmp_path / "folder").mkdir()  # the rename itself fails: a folder is in the way
    with pytest.raises(OSError):
        files.atomic_write(tmp_path / "folder", b"x")
    assert sorted(os.listdir(str(tmp_path))) == ["RESULTS.md", "folder"] and path.read_bytes() == b"before\n"
    assert os.listdir(str(tmp_path / "folder")) == []


def test_a_written_file_is_whole_readable_and_no_temporary_is_left(tmp_path):
    path = tmp_path / "notes.md"
    files.write_text(path, "é\n")
    assert path.read_bytes() == "é\n".encode("utf-8") and (path.stat().st_mode & 0o777) == files.FILE_MODE
    files.append(path, b"more\n")
    assert path.read_bytes() == "é\nmore\n".encode("utf-8") and os.listdir(str(tmp_path)) == ["notes.md"]


def test_concurrent_writers_of_one_file_never_collide(tmp_path):
    """Writers in one process (one pid) each get their own temporary file: every rename lands a whole file."""
    path = tmp_path / "ledger.jsonl.head"
    payloads = [bytes([65 + n]) * (256 * 1024 + n) for n in range(8)]
    start = threading.Barrier(len(payloads))
    problems = []

    def writer(data):
        start.wait()
        for _ in range(25):
            try:
                files.atomic_write(path, data)
                seen = path.read_bytes()
            except Exception as exc:  # noqa: BLE001 - collected, then asserted on
                problems.append(repr(exc))
                return
            if seen not in payloads:
                problems.append("a mixed file of %d bytes" % len(seen))
    threads = [threading.Thread(target=writer, args=(data,)) for data in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == []
    assert path.read_bytes() in payloads and os.listdir(str(tmp_path)) == [path.name]


# ------------------------------------------------------------------------------------------- the verbs
@pytest.mark.parametrize("verb", ["note", "status", "stop", "rank", "report"])
def test_verbs_never_write_through_a_planted_temporary_name(verb, tmp_path, home, capsys, without_replay, in_caller):
    campaign = basic(tmp_path)
    if verb == "stop":  # r010 is in flight: end it first, so that the stop is recorded
        campaign_mod.Campaign(campaign).append("result", run="r010", status="failed", failure={"class": "oom"})
    links = plant_ledger_temporaries(campaign, home)
    links.update(plant(campaign, pid_names("RESULTS.md", "REPORT.md", "recipe.yaml", "past_tuning_project.json")
                       + ["results_throughput.tmp.png"], home))
    argv = {"note": ["note", "a planted link must not be followed"], "status": ["status"],
            "stop": ["stop", "--reason", "nothing left clears the band", "--evidence", "r008", "r009", "r010"],
            "rank": ["rank"], "report": ["report"]}[verb]
    assert cli.main(argv + ["--campaign", str(campaign)]) == EXIT_OK, capsys.readouterr().err
    home.unchanged()
    intact(links)
    for record in {"rank": ("RESULTS.md",), "report": ("REPORT.md", "recipe.yaml", "past_tuning_project.json")
                   }.get(verb, ()) + ("ledger.jsonl.head",):
        assert (campaign / record).is_file() and not (campaign / record).is_symlink()
    assert cli.main(["verify", "--campaign", str(campaign)]) == EXIT_OK


@pytest.mark.parametrize("verb, record, target", [
    ("rank", "RESULTS.md", ".profile"),
    ("rank", "RESULTS.md", MISSING),
    ("report", "REPORT.md", ".bashrc"),
    ("report", "recipe.yaml", ".kube/config"),
    ("report", "recipe.yaml", MISSING),
    ("rank", "results_throughput.png", ".kube/config"),
    ("report", "past_tuning_project.json", ".profile"),
])
def test_a_record_that_is_a_link_is_refused_with_exit_2(verb, record, target, tmp_path, home, capsys,
                                                         without_replay, in_caller):
    campaign = basic(tmp_path)
    link = campaign / record
    os.symlink(str(home.root / target), str(link))
    rows = len(campaign_mod.Campaign(campaign).ledger.rows())
    assert cli.main([verb, "--campaign", str(campaign)]) == EXIT_USAGE
    refused(capsys.readouterr().err, link)
    home.unchanged()
    intact({link: str(home.root / target)})
    written = {"rank": ["RESULTS.md", "results_throughput.png"],
               "report": ["REPORT.md", "recipe.yaml", "past_tuning_project.json"]}[verb]
    assert [name for name in written if os.path.lexists(str(campaign / name)) and name != record] == []
    assert len(campaign_mod.Campaign(campaign).ledger.rows()) == rows  # refused before any row


def test_a_withdrawn_recipe_is_not_renamed_onto_a_link(tmp_path, home, capsys, without_replay):
    campaign = basic(tmp_path)
    assert cli.main(["report", "--campaign", str(campaign)]) == EXIT_OK
    (campaign / ".attune" / "integrity_violation.json").write_text("{}")  # the next report withdraws recipe.yaml
    link = campaign / "recipe.yaml.withdrawn"
    os.symlink(str(home.root / ".bashrc"), str(link))
    shipped = (campaign / "recipe.yaml").read_bytes()
    capsys.readouterr()
    assert cli.main(["report", "--campaign", str(campaign)]) == EXIT_USAGE
    refused(capsys.readouterr().err, link)
    assert (campaign / "recipe.yaml").read_bytes() == shipped
    home.unchanged()
    intact({link: str(home.root / ".bashrc")})


def test_a_chart_linked_after_rank_checked_it_is_not_drawn_through(tmp_path, home):
    """The chart is drawn while the ledger is read: a link planted meanwhile leaves it undrawn, and says why."""
    pytest.importorskip("matplotlib")
    from attune.campaign import chart, ranking
    campaign = basic(tmp_path)
    link = campaign / "results_throughput.png"
    os.symlink(str(home.root / ".kube/config"), str(link))
    why = chart.draw(link, chart.chart_data(ranking.build(campaign_mod.Campaign(campaign).ledger.rows())))
    refused(why, link)
    home.unchanged()
    intact({link: str(home.root / ".kube/config")})


@pytest.fixture
def lessons_campaign(tmp_path):
    b = Builder(tmp_path / "c", campaign_id="alice-llama8b")
    b.baseline(3, 1000.0)
    b.launch("r004", "candidate", "r004", parent="r001", lever="overlap-grad-reduce", hypothesis="h")
    b.result("r004", 900.0)
    b.launch("r005", "confirm", "r004", parent="r004")
    b.result("r005", 900.0)
    b.gate("r004")
    return b.campaign.dir


def lesson(campaign):
    return cli.main(["lesson", "r004", "--campaign", str(campaign), "--text", "llama8b, 8 GPUs: as measured"])


def test_lesson_appends_through_no_planted_name(lessons_campaign, home, capsys):
    links = plant_ledger_temporaries(lessons_campaign, home)
    assert lesson(lessons_campaign) == EXIT_OK, capsys.readouterr().err
    assert "# Campaign lessons" in (lessons_campaign / "levers.md").read_text()
    home.unchanged()
    intact(links)


def test_lesson_refuses_a_levers_md_that_is_a_link(lessons_campaign, home, capsys):
    """levers.md pointing at a copy of the catalog in the home: the lesson is composed, then refused."""
    copy = home.add("levers.md", levers.CATALOG.read_bytes())
    link = lessons_campaign / "levers.md"
    link.unlink()
    os.symlink(str(copy), str(link))
    assert lesson(lessons_campaign) == EXIT_USAGE
    refused(capsys.readouterr().err, link)
    home.unchanged()
    assert [row["kind"] for row in campaign_mod.Campaign(lessons_campaign).ledger.rows()][-1] == "gate"


@pytest.fixture
def init_env(tmp_path):
    """The settings of a new campaign on the local backend."""
    baseline = tmp_path / "baseline.yaml"
    shutil.copy(str(DATA / "recipes" / "megatron_rayjob.yaml"), str(baseline))
    return make_settings(ATTUNE_BASELINE_YAML=str(baseline), ATTUNE_RUN_PREFIX="alice-llama8b-")


def test_init_freezes_its_settings_through_no_planted_name(tmp_path, home, init_env):
    campaign = tmp_path / "c"
    links = plant(campaign / ".attune", ["settings.tmp"] + pid_names("settings.env"), home)
    links.update(plant(campaign, pid_names("ledger.jsonl.head"), home))
    made = campaign_mod.init(campaign, init_env, "alice-llama8b-test")
    assert (campaign / ".attune" / "settings.env").is_file() and made.ledger.first_row() is not None
    home.unchanged()
    intact(links)


def test_init_refuses_a_dangling_levers_md(tmp_path, home, init_env):
    campaign = tmp_path / "c"
    campaign.mkdir()
    os.symlink(str(home.root / MISSING), str(campaign / "levers.md"))
    with pytest.raises(InputError) as caught:
        campaign_mod.init(campaign, init_env, "alice-llama8b-test")
    home.unchanged()  # the old copy followed the link and created authorized_keys
    refused(str(caught.value), campaign / "levers.md")


def test_candidate_new_skips_a_run_folder_planted_as_a_link(tmp_path, home, init_env, capsys):
    made = campaign_mod.init(tmp_path / "c", init_env, "alice-llama8b-test")
    (made.dir / "runs").mkdir()
    os.symlink(str(home.root / ".kube"), str(made.dir / "runs" / "alice-llama8b-r001"))  # a folder of the home
    links = {made.dir / "runs" / "alice-llama8b-r001": str(home.root / ".kube")}
    assert cli.main(["candidate", "new", "--campaign", str(made.dir), "--parent", "baseline", "--set",
                     "overlap-grad-reduce", "--lever", "overlap-grad-reduce", "--hypothesis", "h", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["run"] == "alice-llama8b-r002"
    assert (made.run_dir("alice-llama8b-r002") / "candidate.json").is_file()
    home.unchanged()
    intact(links)


def test_the_planners_notes_never_follow_a_link(tmp_path, home):
    from attune.planner import agent
    campaign = tmp_path / "c"
    links = plant(campaign, ["notes.md.tmp"] + pid_names("notes.md"), home)
    planner = agent.Planner(campaign, out=open(os.devnull, "w"))
    planner.event("launch", run="r001")
    planner.write_notes()
    assert (campaign / "notes.md").read_text().startswith("# Planner notes") and not (campaign / "notes.md").is_symlink()
    home.unchanged()
    intact(links)
    (campaign / "notes.md").unlink()
    os.symlink(str(home.root / ".bashrc"), str(campaign / "notes.md"))  # notes.md is the agent's to write
    with pytest.raises(files.LinkRefused) as caught:
        planner.write_notes()
    refused(str(caught.value), campaign / "notes.md")
    home.unchanged()


def test_run_records_never_follow_a_planted_name(tmp_path, home):
    """progress.json (a local run's quiet time), a Ray job's log copy and the doctor's cache."""
    run_dir = tmp_path / "c" / "runs" / "r001"
    links = plant(run_dir, ["progress.json.tmp", "log.txt.partial"], home)
    log = run_dir / "log.txt"
    log.write_text(" iteration 1/ 10 | elapsed time per iteration (ms): 900.0\n")
    backends._seconds_without_progress(run_dir, log, None)
    assert json.loads((run_dir / "progress.json").read_text())["offset"] > 0
    ray = raybackend.RayBackend(make_settings(), client=types.SimpleNamespace(get_job_logs=lambda run: "a new line\n"))
    ray._copy_logs("r001", run_dir)
    assert log.read_text() == "a new line\n"
    cache = tmp_path / "c" / doctor.CACHE
    links.update(plant(cache.parent, [cache.name + ".tmp"], home))
    assert doctor.remember(tmp_path / "c", "s1", "digest", doctor.Report("local", ())) == cache
    home.unchanged()
    intact(links)


def test_the_ledger_never_writes_through_a_link(tmp_path, home):
    """The log itself, its head's temporary name, and the side file of a torn tail."""
    log = ChainLog(str(tmp_path / "ledger.jsonl"))
    log.append("note", {"text": "first"}, campaign="c1")
    links = plant(tmp_path, pid_names("ledger.jsonl.head") + ["ledger.jsonl.torn-1"], home)
    with open(str(tmp_path / "ledger.jsonl"), "ab") as handle:
        handle.write(b'{"torn": ')  # a crash in the middle of an append
    row = log.append("note", {"text": "second"})
    home.unchanged()
    intact(links)
    assert row["kind"] == "note" and log.rows()[1]["side_file"] == "ledger.jsonl.torn-1.1"
    other = tmp_path / "gpu_hours.jsonl"
    os.symlink(str(home.root / ".profile"), str(other))
    with pytest.raises(files.LinkRefused):
        ChainLog(str(other)).append("note", {"text": "x"}, campaign="c1")
    home.unchanged()


def test_pod_records_never_follow_a_link(tmp_path, home, capsys):
    from attune.pod_hooks import helper_status, wrap
    out = tmp_path / "pod_hooks"
    links = plant(out, [".pod_hooks.json.tmp"], home)
    wrap.write_record(out, {"status": "finished"})
    home.unchanged()
    intact(links)
    assert json.loads((out / "pod_hooks.json").read_text()) == {"status": "finished"}
    (out / "pod_hooks.json").unlink()
    links.update(plant(out, ["pod_hooks.json"], home))
    wrap.write_record(out, {"status": "finished"})  # logged, never raised into the job
    assert "symbolic link" in capsys.readouterr().err
    with pytest.raises(OSError):
        helper_status.replace_text(out / "pod_hooks.json", "x")
    home.unchanged()
    intact(links)


# ------------------------------------------------------------------------------------------- rows
def slime_dumps(folder: Path) -> str:
    torch = pytest.importorskip("torch")
    folder.mkdir(parents=True)
    for rid in range(2):
        samples = [{"index": i, "group_index": i // 2, "tokens": list(range(3 + i, 40 + i)), "response_length": 20,
                    "loss_mask": None, "reward": 1.0, "status": "completed"} for i in range(4)]
        torch.save({"rollout_id": rid, "samples": samples}, str(folder / ("%d.pt" % rid)))
    return str(folder / "{rollout_id}.pt")


def test_rows_from_slime_and_to_slime_never_follow_a_link(tmp_path, home, capsys):
    pytest.importorskip("pyarrow")
    template = slime_dumps(tmp_path / "dumps")
    out = tmp_path / "scratch" / "rows.parquet"
    links = plant(out.parent, ["rows.parquet.tmp"], home)
    assert cli.main(["rows", "from-slime", template, "--out", str(out), "--seq-length", "64", "--vocab-size", "100",
                     "--pad-token-id", "1"]) == EXIT_OK, capsys.readouterr().err
    dump = tmp_path / "scratch" / "dump"
    links.update(plant(dump, ["0.pt.tmp", "1.pt.tmp", "attune_dump.json.tmp"], home))
    assert cli.main(["rows", "to-slime", str(out), "--out", str(dump)]) == EXIT_OK, capsys.readouterr().err
    assert (dump / "attune_dump.json").is_file() and (dump / "1.pt").is_file()
    home.unchanged()
    intact(links)
    capsys.readouterr()
    again = tmp_path / "scratch" / "again.parquet"
    os.symlink(str(home.root / ".bashrc"), str(again))
    assert cli.main(["rows", "from-slime", template, "--out", str(again), "--seq-length", "64",
                     "--vocab-size", "100", "--pad-token-id", "1"]) == EXIT_USAGE
    refused(capsys.readouterr().err, again)
    home.unchanged()
