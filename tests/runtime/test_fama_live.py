"""The FAMA controller inside a running `faultline up`: failures in, a roster out, new episodes take it."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import msgspec
import pytest

from faultline.cli import main
from faultline.core import Control, EpisodeStarted, Note, Notice
from faultline.journal import JournalReader
from faultline.replay import forks_path
from faultline.services.fama import ANALYSIS, CASE, CONTROLLER, FAILED_OUTCOMES, ROSTER, FailureCase
from tests.runtime.test_processes import faultline, finish, wait_until_up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # several processes on a shared machine


async def run_on(cwd: Path, url: str, run_id: str, *extra: str) -> None:
    process = faultline("run", "--nats", url, "--tasks", "4", "--run-id", run_id, "--json", *extra, cwd=cwd)
    err = await finish(process)
    assert process.returncode == 0, err[-2000:]


async def test_the_controller_chooses_a_roster_by_itself_and_new_episodes_take_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "faultline.toml"
    config.write_text(
        f'[journal]\npath = "{tmp_path / "up.sqlite"}"\n[nats]\nstore_dir = "{tmp_path / "nats"}"\n'
        "[fama]\nenabled = true\nmin_failures = 2\nshare = 0.5\n"
    )
    process = faultline("up", "--config", str(config), cwd=tmp_path)
    try:
        up = await wait_until_up(tmp_path, process, timeout=90)  # one process more than a plain `up`
        await run_on(tmp_path, up.url, "before", "--error-rate", "early_stop=0.6")
        with anyio.fail_after(90):  # a loaded machine: the controller is behind the run
            while True:
                assert await anyio.to_thread.run_sync(main, ["helpers", "list", "--json"]) == 0
                if json.loads(capsys.readouterr().out.splitlines()[-1])["rosters"].get("retail"):
                    break
                await anyio.sleep(0.1)
        await run_on(tmp_path, up.url, "after")
        monkeypatch.setenv("COLUMNS", "200")  # one table row per line
        assert await anyio.to_thread.run_sync(main, ["status"]) == 0
        [line] = [line for line in capsys.readouterr().out.splitlines() if "fama over" in line]
        assert "retail" in line and "planner" in line and "fama over 2 failures: early_stop 2" in line
        assert await anyio.to_thread.run_sync(main, ["status", "--json"]) == 0
        workers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        [fama] = [w for w in workers if w.get("type") == "worker" and CONTROLLER in w["agents"]]
        assert [s.startswith("fama-retail-") for s in fama["services"]] == [True] and fama["episodes"] == []
    finally:
        process.terminate()
        err = await finish(process)
    assert process.returncode == 0, err[-2000:]
    with JournalReader(tmp_path / "up.sqlite") as reader:
        rows = list(reader.rows())
    started = {r.episode: r.envelope().body for r in rows if r.kind == "episode_started"}
    rosters = {e.split("-")[0]: b.roster for e, b in started.items() if isinstance(b, EpisodeStarted)}
    assert rosters == {"before": [], "after": ["planner"]}
    assert not [r for r in rows if r.kind == "context_request" and r.episode.startswith("before")]
    assert {r.sender for r in rows if r.kind == "context_reply" and r.episode.startswith("after")} == {"planner"}
    notices = [r.envelope().body for r in rows if r.kind == "notice" and r.sender == CONTROLLER]
    analyses = [n for n in notices if isinstance(n, Notice) and n.text == ANALYSIS]
    agreeing = [n for n in analyses if n.data["main"]["main"][:1] == ["early_stop"]]
    assert len(analyses) >= 2 and len(agreeing) >= 0.9 * len(analyses)  # only early stops were injected
    [decision] = [n for n in notices if isinstance(n, Notice) and n.text == ROSTER]
    assert decision.data["roster"] == ["planner"] and decision.data["counts"]["categories"]["early_stop"] >= 2
    controls = [r.envelope().body for r in rows if r.kind == "control"]
    assert [c.data["helpers"] for c in controls if isinstance(c, Control)] == [["planner"]]
    assert main(["replay", str(tmp_path / "up.sqlite")]) == 0
    assert "identical" in capsys.readouterr().out


async def test_with_attribution_the_controller_attributes_each_failure_from_the_journal_file_read_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    journal = tmp_path / "up.sqlite"
    config = tmp_path / "faultline.toml"
    config.write_text(
        f'[journal]\npath = "{journal}"\n[nats]\nstore_dir = "{tmp_path / "nats"}"\n'
        '[fama]\nenabled = true\ndry_run = true\nattribution = "oracle"\nanalysts = "informed"\n'
    )
    process = faultline("up", "--config", str(config), cwd=tmp_path)
    try:
        up = await wait_until_up(tmp_path, process, timeout=90)
        await run_on(tmp_path, up.url, "a", "--error-rate", "wrong_value=0.5")
        with JournalReader(journal) as reader:
            failed = {
                e.episode for e in reader.episodes() if e.episode.startswith("a-") and e.outcome in FAILED_OUTCOMES
            }
        assert failed
        with anyio.fail_after(120):  # a loaded machine: each failure is attributed with forks first
            while len(_controller_notices(journal, ANALYSIS)) < len(failed):
                await anyio.sleep(0.2)
    finally:
        process.terminate()
        err = await finish(process)
    assert process.returncode == 0, err[-2000:]
    cases = [msgspec.convert(n.data["case"], FailureCase) for n in _controller_inputs(journal)]
    assert {c.episode for c in cases} == failed
    assert all(c.evidence.decisive and c.evidence.decisive.method == "oracle-guided repair" for c in cases)
    assert {c.evidence.decisive.category for c in cases if c.evidence.decisive} == {"wrong_value"}
    analyses = _controller_notices(journal, ANALYSIS)
    assert all("attribution" in v["evidence"] for n in analyses for v in n.data["verdicts"])
    with JournalReader(journal) as reader:
        assert not [e for e in reader.episodes() if e.forked_from]  # the forks are in their own file
    with JournalReader(forks_path(journal)) as forks:
        assert {e.forked_from for e in forks.episodes()} == failed
    assert main(["replay", str(journal)]) == 0
    assert "identical" in capsys.readouterr().out


def _controller_notices(journal: Path, text: str) -> list[Notice]:
    with JournalReader(journal) as reader:
        found = [r.envelope().body for r in reader.rows() if r.kind == "notice" and r.sender == CONTROLLER]
    return [n for n in found if isinstance(n, Notice) and n.text == text]


def _controller_inputs(journal: Path) -> list[Note]:
    with JournalReader(journal) as reader:
        found = [r.envelope().body for r in reader.rows() if r.recipient == CONTROLLER]
    return [n for n in found if isinstance(n, Note) and n.text == CASE]
