"""Both examples end to end from their folders, as their README runs them: run, replay, a faulted run and its
attribution, a campaign and its report; on the scripted model, in separate worker processes."""

from __future__ import annotations

import io
import json
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import NamedTuple

import anyio
import pytest

from faultline._errors import JournalError
from faultline.bus import Bus, EmbeddedServer
from faultline.cli import main
from faultline.core import Envelope, EpisodeCompleted
from faultline.journal import JournalReader
from faultline.journal.otel import episode_spans
from tests.runtime.test_processes import faultline, finish, wait_until_up

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).parents[2] / "examples"


class Example(NamedTuple):
    name: str
    outcomes: dict[str, int]
    fault: str
    """A fault that breaks one record's episode, and whom it hits."""
    record: str
    agent: str
    campaign: str
    """A fault type that breaks episodes without stalling them (a stalled one waits for its timeout)."""


RESEARCH = Example(
    "research", {"success": 3, "failure": 1}, "critical_information_loss", "france-japan", "researcher_a", "memory_loss"
)
DEBATE = Example(
    "debate", {"success": 3, "failure": 1}, "hallucination", "exercise", "pro", "critical_information_loss"
)


@pytest.fixture(scope="module", params=[RESEARCH, DEBATE], ids=lambda e: e.name)
def chosen(request: pytest.FixtureRequest) -> Example:
    example: Example = request.param
    return example


def copy_of(example: Example, parent: Path) -> Path:
    copy = parent / example.name
    shutil.copytree(EXAMPLES / example.name, copy, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    return copy


@pytest.fixture
def example(chosen: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Example:
    """A copy of the example, as the working folder."""
    monkeypatch.chdir(copy_of(chosen, tmp_path))
    return chosen


class Faulted(NamedTuple):
    runs: Path
    summary: dict[str, object]


@pytest.fixture(scope="module")
def faulted_once(chosen: Example, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faulted]:
    """One run of the example's faulted record, which the tests that attribute it copy: each attributes its own
    copy of the journal, as it would have after running the record itself."""
    copy = copy_of(chosen, tmp_path_factory.mktemp("faulted"))
    argv = ["run", "--json", "--task-ids", chosen.record, "--fault", f"{chosen.fault}:from={chosen.agent}"]
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(io.StringIO()) as out:
        patch.chdir(copy)
        assert main(argv) == 0
    (summary,) = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    yield Faulted(copy / "runs", summary)


@pytest.fixture
def faulted(example: Example, faulted_once: Faulted) -> dict[str, object]:
    """The faulted record's run in the working folder's runs/journal.sqlite; its summary line."""
    shutil.copytree(faulted_once.runs, "runs")
    return faulted_once.summary


async def in_thread(*argv: str) -> int:
    """The command line, from an async test (it runs an event loop of its own)."""
    return await anyio.to_thread.run_sync(main, list(argv))


def lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def test_run_then_replay_is_identical(example: Example, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--json"]) == 0
    (summary,) = lines(capsys)
    assert summary["outcomes"] == example.outcomes
    assert main(["journal", "episodes", "runs/journal.sqlite", "--json"]) == 0
    episodes = [row for row in lines(capsys) if row["type"] == "episode"]
    # The scorer that completes them sees no model call: their tokens are the journaled calls'.
    assert len(episodes) == 4 and all(e["tokens"] > 0 for e in episodes)
    assert summary["avg_tokens"] == sum(e["tokens"] for e in episodes) / 4
    assert main(["replay", "runs/journal.sqlite"]) == 0
    assert "identical: 4 episodes" in capsys.readouterr().out
    system = f"{example.name}_system:{example.name.title()}"
    with JournalReader("runs/journal.sqlite") as reader:
        (episode, rows), *_ = reader.by_episode([e.episode for e in reader.episodes()])
    spans = {span.name: span for span in episode_spans(episode, rows)}  # what `journal otel` sends
    root = next(span for name, span in spans.items() if name.startswith("episode "))
    assert root.name.startswith(f"episode {system}/") and root.attributes["faultline.system"] == system
    assert {f"invoke_agent {agent}" for agent in ("scorer",)} <= set(spans)


def test_a_fault_on_one_agent_is_found_by_attribution(
    example: Example, faulted: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    assert faulted["outcomes"] == {"failure": 1}
    assert main(["attribute", "runs/journal.sqlite", "--all-failed", "--json"]) == 0
    episode, _ = lines(capsys)
    assert (episode["method"], episode["agent"], episode["fault"], episode["decided"]) == (
        "fault-event repair",
        example.agent,
        example.fault,
        True,
    )
    fork = episode["evidence"][0]["forks"][0]["fork"]
    assert f"-f{episode['position']}-" in fork  # one position: the table's, the fork id's, the viewer's


def test_forks_and_attribution_take_the_system_from_the_journal(
    example: Example, faulted: dict[str, object], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A run chosen with `--system` leaves no [system] in the configuration: the journal names the system, so
    forks and attribution find its agents; where its code cannot be imported, they and replay say so in one line
    instead of reporting the episode as diverged or stalled."""
    config = Path("faultline.toml")
    config.write_text(re.sub(r"\[system\]\n(?:(?!\[).*\n)*", "", config.read_text()))
    assert "[system]" not in config.read_text()
    assert main(["attribute", "runs/journal.sqlite", "--all-failed", "--json"]) == 0
    episode, _ = lines(capsys)
    assert (episode["agent"], episode["fault"], episode["decided"]) == (example.agent, example.fault, True)
    fork = ["fork", "runs/journal.sqlite", "-e", str(episode["episode"]), "--at", str(episode["position"])]
    assert main([*fork, "--undo-fault", "--out", "runs/undone.sqlite", "--json"]) == 0
    undone, _ = lines(capsys)
    assert undone["outcome"]["outcome"] == "success"

    journal = str(Path("runs/journal.sqlite").resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    system = f"{example.name}_system:{example.name.title()}"
    forks = Path("runs/journal.forks.sqlite").read_bytes()
    for argv in (["replay", journal], ["attribute", journal, "--all-failed"], [*fork, "--undo-fault"]):
        argv = [journal if a == "runs/journal.sqlite" else a for a in argv]
        done = subprocess.run(
            [sys.executable, "-m", "faultline.cli", *argv], cwd=elsewhere, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 1, done.stdout + done.stderr
        (error,) = done.stderr.splitlines()
        assert f"ran on a system of its own, and cannot load system {system!r}: " in error
        assert error.endswith("or name the folder that holds it with --plugin-path (plugins.path in the configuration)")
    assert Path("runs/journal.forks.sqlite").read_bytes() == forks  # no fork written
    replay = ["replay", journal, "--plugin-path", str(Path.cwd())]
    done = subprocess.run(
        [sys.executable, "-m", "faultline.cli", *replay], cwd=elsewhere, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "identical" in done.stdout, done.stdout + done.stderr


async def test_a_journal_started_by_hand_takes_completions_from_the_systems_completer_only(
    example: Example, nats_server: EmbeddedServer, bus: Bus
) -> None:
    """`journal serve` with no --completers reads them from the configuration, as `up` passes them: the system's
    scorer completes its episodes; an agent of the system that claims to complete one is dead-lettered."""
    journal = Path("runs/journal.sqlite")
    serve = faultline("journal", "serve", str(journal), "--nats", nats_server.url, cwd=Path.cwd())
    try:
        for sender in ("scorer", example.agent):
            await bus.publish(
                Envelope(id=f"by-{sender}", episode="e1", sender=sender, body=EpisodeCompleted(outcome="success"))
            )
        with anyio.fail_after(60):
            while rows_in(journal) < 2:  # the scorer's completion, and the other's dead letter
                assert serve.poll() is None, serve.communicate()[1].decode()
                await anyio.sleep(0.05)
    finally:
        serve.send_signal(signal.SIGINT)
        said = await finish(serve)
    assert f"journal service writes {journal} from the stream at {nats_server.url}; Ctrl-C stops it" in said
    with JournalReader(journal) as reader:
        completed, letter = reader.rows()
    assert (completed.kind, completed.sender) == ("episode_completed", "scorer")
    assert letter.kind == "dead_letter"
    reason = letter.envelope().body.reason  # type: ignore[union-attr]
    assert reason.startswith(f"completion refused: {example.agent!r} may not complete an episode (only runner, scorer)")


def rows_in(journal: Path) -> int:
    """Rows in a journal another process may be writing (0 before it has any)."""
    try:
        with JournalReader(journal) as reader:
            return reader.last_pos
    except JournalError:
        return 0


def test_sim_on_a_system_of_ones_own_is_said_to_echo_not_to_follow_a_ground_truth(
    example: Example, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--model", "sim", "--task-ids", example.record]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert "note: sim answers the agents of a system of one's own with their own last message" in said
    assert "ground truth;" not in said


def test_the_attribution_table_reads_at_80_columns(
    example: Example, faulted: dict[str, object], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["attribute", "runs/journal.sqlite", "--all-failed"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80
    assert f"{example.record}-t0" in out and "…" not in out  # ids whole, nothing cut
    assert f"{example.agent}," in out  # the step
    # The undone fault's forks all succeed and its control's (the fault kept, the rest run again) all fail.
    assert "fault-event repair: p" in out and "1.00 [0.68, 1.00], 8 of" in out
    assert "its control: p 0.00" in out and "0 of 8" in out and "decided 1/1" in out
    assert "did:" in out  # what the agent did
    assert main(["journal", "episodes", "runs/journal.sqlite"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80
    assert f"{example.agent} at" in out and "attributed from the forks in journal.forks.sqlite" in out


def test_a_campaign_reports_each_fault_against_the_baseline(
    example: Example, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ["--out", "runs/campaign", "--tasks", "2", "--faults", f"storm,{example.campaign}"]
    assert main(["campaign", *out, "--episode-timeout", "10"]) == 0
    capsys.readouterr()
    assert main(["report", "runs/campaign", "--json"]) == 0
    report = lines(capsys)
    rows = {row["fault"]: row for row in report if row.get("type") == "fault"}
    assert report[-1]["domain"] == f"{example.name}_system:{example.name.title()}"  # the system the campaign ran
    assert set(rows) == {"storm", example.campaign}
    assert rows["storm"]["rs"] == 1.0
    assert rows[example.campaign]["rs"] < 1.0
    assert 0 <= rows["storm"]["no_effect"] <= rows["storm"]["injected"] == 2  # which copy a storm makes varies
    assert rows[example.campaign]["no_effect"] == 0  # this fault changed what the agents did
    assert main(["report", "runs/campaign", "--html", "runs/report.html"]) == 0
    assert "what the columns mean" in Path("runs/report.html").read_text()
    assert main(["report", "runs/campaign"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "no effect" in text and "RS_f: units the faulted run solved over units the fault-free baseline" in text


def test_a_fault_that_cannot_apply_to_the_system_is_refused_in_one_line_before_anything_starts(
    example: Example, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--fault", "tool_selection_error"]) == 1
    assert main(["run", "--fault", "blind_trust"]) == 1
    assert main(["campaign", "--out", "runs/c", "--faults", "redundant_call"]) == 2
    assert main(["inject", "blind_trust", "--nats", "nats://127.0.0.1:9"]) == 1  # refused before it connects
    errors = capsys.readouterr().err.splitlines()
    assert errors == [
        f"faultline: error: fault 'tool_selection_error': tool_selection_error rewrites tool_call messages and system"
        f" {example.name!r} sends none (it sends finished, note, start; System.sends says so)",
        "faultline: error: fault 'blind_trust': blind_trust changes the system prompt or instruction the built-in"
        f" tool-use agents read from their Start; the agents of system {example.name!r} build their own prompts",
        f"faultline: usage error: --faults: redundant_call rewrites tool_call messages and system {example.name!r}"
        " sends none (it sends finished, note, start; System.sends says so)",
        "faultline: error: fault 'blind_trust': blind_trust changes the system prompt or instruction the built-in"
        f" tool-use agents read from their Start; the agents of system {example.name!r} build their own prompts",
    ]
    assert not Path("runs").exists()  # refused before any process started


async def test_a_long_running_system_serves_runs_and_live_faults(
    example: Example, capsys: pytest.CaptureFixture[str]
) -> None:
    """`faultline up` runs the system's own agents (not the built-in helpers, one of which is also called
    `planner`), and a run on it with a rule injected live completes like the local one."""
    up = faultline("up", cwd=Path.cwd())
    try:
        url = (await wait_until_up(Path.cwd(), up)).url
        assert await in_thread("run", "--nats", url, "--json", "--episode-timeout", "30") == 0
        (summary,) = lines(capsys)
        assert summary["outcomes"] == example.outcomes
        assert summary["journal"] == str(Path("runs/journal.sqlite").resolve()) and summary["avg_tokens"] > 0
        assert await in_thread("inject", "storm", "--from", example.agent, "--json") == 0
        assert await in_thread("run", "--json", "--episode-timeout", "30") == 0  # finds the up running here
        _, _, summary = lines(capsys)
        assert summary["outcomes"] == example.outcomes  # duplicates are ignored by these agents
        assert await in_thread("faults", "clear") == 0
        capsys.readouterr()
        assert await in_thread("campaign", "--out", "runs/c", "--tasks", "1", "--faults", "storm") == 0
        assert f"the cells run on the `faultline up` running here (pid {up.pid}" in capsys.readouterr().err
    finally:
        up.send_signal(signal.SIGINT)
        assert "journal caught up" in await finish(up)
    assert main(["replay", "runs/journal.sqlite"]) == 0
    assert "identical: 10 episodes" in capsys.readouterr().out
