"""A fork's numbers are those of what it ran: its copied history keeps its source's times, and the time between the
source's run and the fork's counts in no duration, start, filter, timeline, latency or trace; its tokens and model
costs are those of the calls it made, not of the history it copied."""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import json
import re
import shutil
import sqlite3
import time
from datetime import datetime
from pathlib import Path

import msgspec
import pytest

from faultline.cli import main
from faultline.core import EpisodeCompleted, EpisodeStarted, Recording
from faultline.journal import JournalReader, JournalRow, elapsed, verify, write_view
from faultline.journal.otel import episode_spans
from faultline.replay import forks_path
from tests import jsonl

GAP_S = 2.0
"""How long after its source each fork is made; every duration of a fork here takes a small part of it."""


class Forked(msgspec.Struct, frozen=True, kw_only=True):
    journal: Path
    source: str
    fork: str
    fork_of_fork: str
    made_at: float
    """A moment after the source ran and before the fork did."""
    result: dict  # type: ignore[type-arg]
    """What `fork --json` said of the fork."""


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:  # type: ignore[type-arg]
    code = main([*args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows, _ = jsonl.read(out)
    return rows


def _quietly(*args: str) -> list[dict]:  # type: ignore[type-arg]
    """The rows a command's `--json` gives, kept from the tests' output."""
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main([*args, "--json"]) == 0, args
    rows, _ = jsonl.read(out.getvalue())
    return rows


def _late_user_turn(journal: Path, episode: str) -> int:
    """The last user turn but one: after it the agents still call the model (none answers the last, which ends
    the conversation), so the fork makes calls of its own beside those of the history it copies."""
    with JournalReader(journal) as reader:
        turns = [r.pos for r in reader.episode_rows(episode) if r.kind == "user_turn"]
    assert len(turns) >= 3
    return turns[-2]


@pytest.fixture(scope="module")
def forked(tmp_path_factory: pytest.TempPathFactory) -> Forked:
    """An episode run by `faultline run`, then, each after a pause, a fork of it and a fork of that fork."""
    journal = tmp_path_factory.mktemp("fork_times") / "journal.sqlite"
    _quietly("run", "--tasks", "1", "--seed", "3", "--journal", str(journal))
    with JournalReader(journal) as reader:
        [source] = [e.episode for e in reader.episodes()]
    time.sleep(GAP_S)
    made_at = time.time()
    [result] = _quietly("fork", str(journal), "-e", source, "--at", str(_late_user_turn(journal, source)), "--keep")
    forks = forks_path(journal)
    with JournalReader(forks) as reader:
        [fork] = [e.episode for e in reader.episodes()]
    time.sleep(GAP_S)
    _quietly("fork", str(forks), "-e", fork, "--at", str(_late_user_turn(forks, fork)), "--keep", "--into-source")
    with JournalReader(forks) as reader:
        [fork_of_fork] = [e.episode for e in reader.episodes() if e.forked_from == fork]
    return Forked(journal=journal, source=source, fork=fork, fork_of_fork=fork_of_fork, made_at=made_at, result=result)


def _rows(journal: Path, episode: str) -> list[JournalRow]:
    with JournalReader(journal) as reader:
        return list(reader.episode_rows(episode))


def _started(rows: list[JournalRow]) -> EpisodeStarted:
    body = next(r for r in rows if r.kind == "episode_started").decoded_body()
    assert isinstance(body, EpisodeStarted)
    return body


def test_a_fork_copies_its_history_with_its_times_and_its_start_says_how_many_rows_that_is(forked: Forked) -> None:
    source = _rows(forked.journal, forked.source)
    fork = _rows(forks_path(forked.journal), forked.fork)
    started = _started(fork)
    history = [r for r in source if r.pos < started.forked_at]
    assert started.copied == len(history)
    assert [(r.id if r.kind != "episode_started" else "", r.ts) for r in fork[: started.copied]] == [
        (r.id if r.kind != "episode_started" else "", r.ts) for r in history
    ]
    assert all(r.ts >= forked.made_at for r in fork[started.copied :])  # the message at the fork point too


def test_a_fork_of_a_fork_records_its_own_copy_not_its_sources(forked: Forked) -> None:
    forks = forks_path(forked.journal)
    first, second = _started(_rows(forks, forked.fork)), _started(_rows(forks, forked.fork_of_fork))
    assert second.copied == len([r for r in _rows(forks, forked.fork) if r.pos < second.forked_at])
    assert second.copied > first.copied


def test_journal_episodes_times_a_fork_by_its_live_part(forked: Forked, capsys: pytest.CaptureFixture[str]) -> None:
    [source] = _run(capsys, "journal", "episodes", str(forked.journal))
    fork, fork_of_fork = _run(capsys, "journal", "episodes", str(forks_path(forked.journal)))
    assert (fork["episode"], fork_of_fork["episode"]) == (forked.fork, forked.fork_of_fork)
    for episode in (fork, fork_of_fork):
        assert 0 < episode["duration_s"] < GAP_S / 2
        assert episode["first_ts"] >= forked.made_at > source["last_ts"]
        assert episode["duration_s"] == episode["last_ts"] - episode["first_ts"]
    assert fork_of_fork["first_ts"] >= fork["last_ts"] + GAP_S
    with JournalReader(forks_path(forked.journal)) as reader:
        summary = reader.episode(forked.fork)
    assert summary is not None and summary.first_ts == fork["first_ts"] and summary.duration_s < GAP_S / 2


def test_the_table_and_the_header_of_show_give_a_fork_its_own_seconds(
    forked: Forked, capsys: pytest.CaptureFixture[str]
) -> None:
    forks = str(forks_path(forked.journal))
    assert main(["journal", "episodes", forks]) == 0
    table = capsys.readouterr().out
    seconds = [float(line.split("│")[-2]) for line in table.splitlines() if f"│ {forked.fork} " in line]
    assert len(seconds) == 1 and seconds[0] < GAP_S / 2
    assert main(["journal", "show", forks, "-e", forked.fork]) == 0
    shown = capsys.readouterr().out
    header = re.search(r"defenses, ([0-9.]+)s", shown)
    assert header and float(header.group(1)) < GAP_S / 2
    rows = _rows(forks_path(forked.journal), forked.fork)
    last = re.search(rf"^ *{rows[-1].pos} +([0-9.]+) ", shown, re.M)
    assert last and float(last.group(1)) < _history_span(rows) + GAP_S / 2


def _history_span(rows: list[JournalRow]) -> float:
    copied = _started(rows).copied
    return max(r.ts for r in rows[:copied]) - rows[0].ts


def test_since_takes_a_fork_by_when_it_ran(forked: Forked, capsys: pytest.CaptureFixture[str]) -> None:
    between = datetime.fromtimestamp(forked.made_at).isoformat()
    forks = str(forks_path(forked.journal))
    assert [e["episode"] for e in _run(capsys, "journal", "episodes", forks, "--since", between)] == [
        forked.fork,
        forked.fork_of_fork,
    ]
    assert _run(capsys, "journal", "episodes", str(forked.journal), "--since", between) == []


def test_elapsed_leaves_out_the_time_between_a_source_and_its_fork(forked: Forked) -> None:
    source = _rows(forked.journal, forked.source)
    fork = _rows(forks_path(forked.journal), forked.fork)
    copied = _started(fork).copied
    offsets = elapsed(fork)
    assert offsets[:copied] == [r.ts - fork[0].ts for r in fork[:copied]]  # the history's, as in its source
    assert min(offsets[copied:]) == _history_span(fork)  # the live part follows on from the history's last time
    assert max(offsets) < _history_span(fork) + GAP_S / 2
    assert elapsed(source) == [r.ts - source[0].ts for r in source]


def test_the_view_gives_a_fork_its_own_seconds_and_a_timeline_without_the_gap(forked: Forked, tmp_path: Path) -> None:
    page = tmp_path / "view.html"
    write_view(forked.journal, page, forks=forks_path(forked.journal))
    text = page.read_text()
    [fork] = [e for e in json.loads(_tag(text, "index")) if e["id"] == forked.fork]
    assert 0 < fork["seconds"] < GAP_S / 2 and fork["first_ts"] >= forked.made_at
    chunk = json.loads(gzip.decompress(base64.b64decode(_tag(text, f"c{fork['chunk']}"))))
    rows = _rows(forks_path(forked.journal), forked.fork)
    offsets = elapsed(rows)
    assert [r[1] for r in chunk["rows"]] == [round(offset, 3) for offset in offsets]
    at = {row.id: offset for row, offset in zip(rows, offsets, strict=True)}
    assert [r[8] for r in chunk["rows"]] == [  # seconds after the message that caused each, on that timeline too
        round(at[row.id] - at[row.causation], 3) if row.causation in at else None for row in rows
    ]


def _tag(text: str, tag_id: str) -> str:
    found = re.search(rf'<script type="[^"]+" id="{tag_id}">(.*?)</script>', text, re.S)
    assert found, tag_id
    return found.group(1).replace("<\\/", "</")


def _model_calls(rows: list[JournalRow]) -> list[Recording]:
    calls = [r.decoded_body() for r in rows if r.kind == "recording"]
    return [c for c in calls if isinstance(c, Recording) and c.call == "llm"]


def _tokens(calls: list[Recording]) -> int:
    return sum(c.response["usage"]["prompt_tokens"] + c.response["usage"]["completion_tokens"] for c in calls)


def _made(rows: list[JournalRow]) -> list[Recording]:
    """The model calls a fork made: those of its live part."""
    return _model_calls(rows[_started(rows).copied :])


def test_a_forks_tokens_and_model_costs_are_those_of_the_calls_it_made(
    forked: Forked, capsys: pytest.CaptureFixture[str]
) -> None:
    forks = forks_path(forked.journal)
    listed = {e["episode"]: e for e in _run(capsys, "journal", "episodes", str(forks))}
    for episode in (forked.fork, forked.fork_of_fork):
        rows = _rows(forks, episode)
        made = _made(rows)
        assert 0 < len(made) < len(_model_calls(rows))  # the history it copied holds calls of its source's
        assert listed[episode]["tokens"] == _tokens(made)
        with JournalReader(forks) as reader:
            costs = reader.agent_costs([episode])
            [by_episode] = reader.episode_costs([episode]).values()
        assert sum(c.calls for c in costs) == sum(c.calls for c in by_episode) == len(made)
        assert sum(c.tokens for c in costs) == sum(c.tokens for c in by_episode) == _tokens(made)
    with JournalReader(forks) as reader:  # over every episode of the file, each fork counts what it made
        assert sum(c.calls for c in reader.agent_costs()) == sum(len(_made(_rows(forks, e))) for e in listed)
    source = _rows(forked.journal, forked.source)
    [source_listed] = _run(capsys, "journal", "episodes", str(forked.journal))
    with JournalReader(forked.journal) as reader:
        assert sum(c.calls for c in reader.agent_costs()) == len(_model_calls(source))
    assert source_listed["tokens"] == _tokens(_model_calls(source))


def test_the_fork_command_gives_the_forks_completion_the_seconds_and_tokens_it_ran(
    forked: Forked, capsys: pytest.CaptureFixture[str]
) -> None:
    forks = forks_path(forked.journal)
    rows = _rows(forks, forked.fork)
    journaled = next(r for r in rows if r.kind == "episode_completed").decoded_body()
    assert isinstance(journaled, EpisodeCompleted)
    assert journaled.latency_s > GAP_S  # as its agent measured it: from the episode's start in the source
    [listed] = [e for e in _run(capsys, "journal", "episodes", str(forks)) if e["episode"] == forked.fork]
    again = _run(capsys, "fork", str(forked.journal), "-e", forked.source, "--at", str(forked.result["at"]), "--keep")
    assert again[0]["existing"] and not forked.result["existing"]
    for result in (forked.result, again[0]):
        outcome = result["outcome"]
        assert outcome["latency_s"] == listed["duration_s"] < GAP_S / 2
        assert outcome["tokens"] == listed["tokens"] == _tokens(_made(rows))
        assert (outcome["outcome"], outcome["turns"]) == (journaled.outcome, journaled.turns)


def test_the_view_counts_a_forks_model_use_by_the_calls_it_made(forked: Forked, tmp_path: Path) -> None:
    page = tmp_path / "view.html"
    write_view(forked.journal, page, forks=forks_path(forked.journal))
    index = {e["id"]: e for e in json.loads(_tag(page.read_text(), "index"))}
    made = _made(_rows(forks_path(forked.journal), forked.fork))
    agents = index[forked.fork]["agents"]
    assert sum(a["calls"] for a in agents.values()) == len(made)
    assert sum(a["tokens"] for a in agents.values()) == _tokens(made)
    source = index[forked.source]["agents"]
    assert sum(a["calls"] for a in source.values()) == len(_model_calls(_rows(forked.journal, forked.source)))


def test_a_forks_trace_holds_what_it_ran_and_links_to_its_sources(forked: Forked) -> None:
    rows = _rows(forks_path(forked.journal), forked.fork)
    spans = episode_spans(forked.fork, rows)
    [root] = [s for s in spans if s.parent is None]
    live = rows[_started(rows).copied :]
    assert (root.start_time, root.end_time) == (int(live[0].ts * 1e9), int(live[-1].ts * 1e9))
    assert all(s.start_time is not None and s.start_time >= int(forked.made_at * 1e9) for s in spans)
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == len(_made(rows))
    used = [dict(s.attributes or {}) for s in chats]
    assert sum(u["gen_ai.usage.input_tokens"] + u["gen_ai.usage.output_tokens"] for u in used) == _tokens(_made(rows))
    assert dict(root.attributes or {})["faultline.forked_at"] == forked.result["at"]
    source_rows = _rows(forked.journal, forked.source)
    source = episode_spans(forked.source, source_rows)
    [source_root] = [s for s in source if s.parent is None]
    assert [link.context for link in root.links] == [source_root.context]
    assert not source_root.links
    assert len([s for s in source if s.name.startswith("chat ")]) == len(_model_calls(source_rows))


def test_a_fork_journaled_before_forks_recorded_their_copy_is_read_as_then(tmp_path: Path) -> None:
    """The golden run journal holds a fork an earlier version wrote: it opens, verifies, and keeps the times of all
    its rows."""
    path = Path(shutil.copy(Path(__file__).parents[1] / "replay" / "golden" / "runs.db", tmp_path / "runs.db"))
    assert verify(path).ok
    with JournalReader(path) as reader:
        [fork] = [e for e in reader.episodes() if e.forked_from]
        rows = list(reader.episode_rows(fork.episode))
    assert _started(rows).copied == 0
    with contextlib.closing(sqlite3.connect(path)) as conn:
        first, last = conn.execute(
            "SELECT first_ts, last_ts FROM episodes WHERE episode = ?", (fork.episode,)
        ).fetchone()
    assert (fork.first_ts, fork.last_ts) == (first, last)
    assert elapsed(rows) == [r.ts - rows[0].ts for r in rows]


def test_a_fork_is_of_no_run_though_its_start_keeps_its_sources(forked: Forked) -> None:
    """A fork into a journal with its source's run (here a fork of a fork, into its source's file) is not one of
    that run's trials: pass^k, costs and `--run` count the episodes the run started."""
    with JournalReader(forked.journal) as reader:
        run = reader.runs()[forked.source]
        assert reader.of_run(run) == [forked.source]
        assert reader.forks() == set()
    with JournalReader(forks_path(forked.journal)) as reader:
        assert reader.runs() == {forked.fork: run, forked.fork_of_fork: run}
        assert reader.forks() == {forked.fork, forked.fork_of_fork}
        assert reader.of_run(run) == []
