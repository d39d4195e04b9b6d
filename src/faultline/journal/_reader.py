"""Reading a journal file: rows in order, by episode, from a position, and the episode list.

The reader never writes (its connection is query-only), so it can run beside the
writer (WAL mode) or on a copy on another machine. Rows keep their bodies encoded; decoding happens only when
a caller asks for `row.envelope()`. Model requests stored content-addressed (`_requests`) are
expanded to the bodies as received, unless the reader is asked for them as stored: replay
compares request digests only, and so reads neither the items nor their keys' contents.
"""

from __future__ import annotations

import heapq
import itertools
import sqlite3
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import msgspec

from faultline._errors import JournalError
from faultline._files import not_a_file
from faultline.core import EpisodeCompleted, digest, in_run
from faultline.journal._requests import BlobStore, is_compact
from faultline.journal._rows import GENESIS, JournalRow
from faultline.journal._schema import ROW_SELECT, JournalSettings, check, connect_readonly
from faultline.journal._set import CELL_EPISODES, SetManifest, is_journal_set, journal_files, read_manifest, set_of
from faultline.journal._timing import copied_rows


class EpisodeSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the `episodes` view: an episode's start, outcome and counts.

    `outcome` and `reward` are None while the episode has no completed event. `first_ts` and `last_ts` are the
    times of its first and last rows, and `tokens` what its completion tallied (every agent's model calls where
    it tallied none). A fork's numbers are those of its live part, the rows after its copied history
    (`EpisodeStarted.copied`): its times, since the copy keeps its source's, and its `tokens`, those of the model
    calls it made, every agent's; its `turns` are those of the conversation it ended with. The `episodes` view in
    the file counts all its rows: a view is part of the file as it was created, and this reading holds for files of
    every version.
    """

    episode: str
    started_pos: int | None
    completed_pos: int | None
    domain: str
    task: str
    trial: int
    forked_from: str
    outcome: str | None
    reward: float | None
    cause: str
    turns: int
    tokens: int
    messages: int
    tool_calls: int
    faults: int
    defenses: int
    errors: int
    first_ts: float
    last_ts: float

    @property
    def duration_s(self) -> float:
        """How long the episode ran; a fork, from the first to the last message of its live part."""
        return self.last_ts - self.first_ts

    def completion(self) -> EpisodeCompleted | None:
        """How the episode completed, as its completed event said; None while it has none."""
        if not self.outcome:
            return None
        return EpisodeCompleted(
            outcome=self.outcome,  # type: ignore[arg-type]
            reward=self.reward or 0.0,
            cause=self.cause,
            turns=self.turns,
            tokens=self.tokens,
        )


class AgentCost(msgspec.Struct, frozen=True, kw_only=True):
    """One agent's model calls over some episodes (the `model_calls` view, summed)."""

    agent: str
    episodes: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    models: str = ""
    """The models it called, comma-separated, in no set order."""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class EpisodeFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which episodes a command works on; every field left None matches all.

    `status`: "passed" (success), "failed" (failure or timeout), "errored" (error) or
    "incomplete" (no completion journaled). `fault`: a fault type applied in the episode.
    `since`: episodes whose first message is at or after this time (seconds since the epoch); a fork's first is
    that of its live part (`EpisodeSummary.first_ts`), so a fork made today of last week's episode is today's.
    `run`: the episodes of that run, as `JournalReader.of_run` finds them.
    """

    status: Literal["passed", "failed", "errored", "incomplete"] | None = None
    task: str | None = None
    domain: str | None = None
    fault: str | None = None
    since: float | None = None
    run: str | None = None


class _RecordedRun(msgspec.Struct):
    """Only the run of an episode-started body; its other fields are skipped unread."""

    run: str = ""


_recorded_run = msgspec.msgpack.Decoder(_RecordedRun)


_STATUS_OUTCOMES: dict[str, tuple[str | None, ...]] = {
    "passed": ("success",),
    "failed": ("failure", "timeout"),
    "errored": ("error",),
    "incomplete": (None,),
}


_EPISODE_SELECT = ", ".join(EpisodeSummary.__struct_fields__)


class _FileReader:
    """A read-only view of one journal file (`JournalReader` says how to use it)."""

    def __init__(
        self, path: str | Path, settings: JournalSettings | None = None, *, expand_requests: bool = True
    ) -> None:
        self.path = Path(path)
        self._conn = connect_readonly(self.path, settings or JournalSettings())
        self.version = check(self._conn, self.path)
        self._blobs = BlobStore(self._conn) if expand_requests else None

    def _row(self, values: tuple[Any, ...]) -> JournalRow:
        row = JournalRow(*values)
        if self._blobs is not None and is_compact(row.body):
            row = msgspec.structs.replace(row, body=self._blobs.expand(row.body, f"{self.path}: row {row.pos}"))
        return row

    def _rows(self, cursor: sqlite3.Cursor) -> Iterator[JournalRow]:
        for values in cursor:
            yield self._row(values)

    def _query(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: read failed ({exc})") from None

    # -- positions -----------------------------------------------------------------------------

    @property
    def last_pos(self) -> int:
        """Position of the last row, 0 when empty (positions are contiguous from 1); read anew each time."""
        row = self._query("SELECT pos FROM messages ORDER BY pos DESC LIMIT 1").fetchone()
        return row[0] if row else 0

    @property
    def head(self) -> str:
        """Chain value of the last row (GENESIS when empty); read anew each time."""
        row = self._query("SELECT chain FROM messages ORDER BY pos DESC LIMIT 1").fetchone()
        return row[0] if row else GENESIS

    def row(self, pos: int) -> JournalRow:
        values = self._query(f"SELECT {ROW_SELECT} FROM messages WHERE pos = ?", (pos,)).fetchone()
        if values is None:
            raise JournalError(f"{self.path}: no row at position {pos}")
        return self._row(values)

    # -- scans ---------------------------------------------------------------------------------

    def rows(self, start: int = 1, stop: int | None = None) -> Iterator[JournalRow]:
        """Rows with start <= pos (< stop), in position order, streamed from one scan."""
        if stop is None:
            return self._rows(self._query(f"SELECT {ROW_SELECT} FROM messages WHERE pos >= ? ORDER BY pos", (start,)))
        return self._rows(
            self._query(f"SELECT {ROW_SELECT} FROM messages WHERE pos >= ? AND pos < ? ORDER BY pos", (start, stop))
        )

    def tail(self, n: int) -> list[JournalRow]:
        """The last `n` rows, oldest first."""
        cursor = self._query(f"SELECT {ROW_SELECT} FROM messages ORDER BY pos DESC LIMIT ?", (max(n, 0),))
        return list(self._rows(cursor))[::-1]

    def has_episode(self, episode: str) -> bool:
        """Whether any row belongs to `episode` (one lookup in the episode index)."""
        return self._query("SELECT 1 FROM messages WHERE episode = ? LIMIT 1", (episode,)).fetchone() is not None

    def episode_rows(self, episode: str, start: int = 1) -> Iterator[JournalRow]:
        """One episode's rows from position `start` on, in position order."""
        return self._rows(
            self._query(
                f"SELECT {ROW_SELECT} FROM messages WHERE episode = ? AND pos >= ? ORDER BY pos",
                (episode, start),
            )
        )

    def by_episode(self, episodes: Iterable[str] | None = None) -> Iterator[tuple[str, list[JournalRow]]]:
        """(episode, its rows in position order) for every episode, or the ones named.

        One scan of the (episode, pos) index, so memory holds one episode at a time:
        the way to replay thousands of episodes.
        """
        if episodes is None:
            cursor = self._query(f"SELECT {ROW_SELECT} FROM messages ORDER BY episode, pos")
            current: list[JournalRow] = []
            for row in self._rows(cursor):
                if current and row.episode != current[0].episode:
                    yield current[0].episode, current
                    current = []
                current.append(row)
            if current:
                yield current[0].episode, current
            return
        for episode in episodes:
            yield episode, list(self.episode_rows(episode))

    # -- derived views -------------------------------------------------------------------------

    def episodes(self) -> list[EpisodeSummary]:
        """Every episode that has a started or completed event, in order of first appearance."""
        cursor = self._query(f"SELECT {_EPISODE_SELECT} FROM episodes ORDER BY coalesce(started_pos, completed_pos)")
        names = EpisodeSummary.__struct_fields__
        return self._as_ran([EpisodeSummary(**dict(zip(names, values, strict=True))) for values in cursor])

    def _as_ran(self, summaries: list[EpisodeSummary]) -> list[EpisodeSummary]:
        """`summaries` with the numbers of what each ran: a fork's times and tokens are its live part's."""
        live = self._live_starts([s.episode for s in summaries if s.forked_from])
        return self._with_model_tokens(self._timed_live(summaries, live), live)

    def _live_starts(self, episodes: Collection[str] | None = None) -> dict[str, int]:
        """Where the live part (`live_part`) of each fork among `episodes` (default: all) begins, by position: the
        forks whose start records the history they copied, and that ran something after it."""
        found: dict[str, int] = {}
        for episode, body in self._fork_starts(episodes).items():
            copied = copied_rows(body)
            query = "SELECT pos FROM messages WHERE episode = ? ORDER BY pos LIMIT 1 OFFSET ?"
            first = self._query(query, (episode, copied)).fetchone() if copied else None
            if first is not None:
                found[episode] = first[0]
        return found

    def _fork_starts(self, episodes: Collection[str] | None = None) -> dict[str, bytes]:
        """The body of each fork's start among `episodes` (default: all), by episode: each episode whose start
        names the episode it was forked from."""
        if episodes is not None and not episodes:
            return {}
        named = "" if episodes is None else " AND episode IN (SELECT value FROM json_each(?))"
        params = () if episodes is None else (msgspec.json.encode(sorted(episodes)).decode(),)
        starts: dict[str, bytes] = {}
        for episode, body in self._query(
            "SELECT episode, body FROM messages WHERE kind = 'episode_started'"
            f" AND json_extract(facts, '$.forked_from') != ''{named} ORDER BY pos",
            params,
        ):
            starts.setdefault(episode, body)
        return starts

    def forks(self) -> set[str]:
        """Every fork: each episode whose start names the episode it was forked from."""
        return set(self._fork_starts())

    def _timed_live(self, summaries: list[EpisodeSummary], live: Mapping[str, int]) -> list[EpisodeSummary]:
        """`summaries`, each fork's timed by its live part (from its position in `live`): the first and last times
        the view gives are its copied history's first and its own last, and the copy keeps its source's times."""
        timed = []
        for s in summaries:
            if s.episode in live:
                span = self._query(
                    "SELECT min(ts), max(ts) FROM messages WHERE episode = ? AND pos >= ?", (s.episode, live[s.episode])
                ).fetchone()
                s = msgspec.structs.replace(s, first_ts=span[0], last_ts=span[1])
            timed.append(s)
        return timed

    def _with_model_tokens(self, summaries: list[EpisodeSummary], live: Mapping[str, int]) -> list[EpisodeSummary]:
        """`summaries`, each whose completion reports no tokens given those of the model calls journaled in it: the
        scorer that grades a system of one's own sees none of its agents' calls, nor does the runner that ends an
        episode at its timeout. A fork's (in `live`) are always those of the calls it made: its agents' tallies go
        on from the history they rebuilt, and count its source's calls too."""
        lacking = [s.episode for s in summaries if not s.tokens or s.episode in live]
        if not lacking:
            return summaries
        spent = {episode: sum(c.tokens for c in costs) for episode, costs in self._episode_costs(lacking, live).items()}
        return [
            msgspec.structs.replace(s, tokens=spent.get(s.episode, 0))
            if s.episode in live or spent.get(s.episode)
            else s
            for s in summaries
        ]

    def domains(self) -> dict[str, str]:
        """Each episode with a started or completed event and its domain ("" for none), from the kind index."""
        cursor = self._query(
            "SELECT episode, max(coalesce(json_extract(facts, '$.domain'), '')) FROM messages"
            " WHERE kind IN ('episode_started', 'episode_completed') GROUP BY episode"
        )
        return dict(cursor.fetchall())

    def runs(self) -> dict[str, str]:
        """Each episode whose first start records its run, with that run; from the kind index."""
        found: dict[str, str] = {}
        for episode, body in self._query(
            "SELECT episode, body FROM messages WHERE kind = 'episode_started' ORDER BY pos"
        ):
            if episode not in found:
                found[episode] = _run_of(body)
        return {episode: run for episode, run in found.items() if run}

    def faulted(self, fault: str) -> set[str]:
        """The episodes in which `fault` was applied."""
        return {e for (e,) in self._query("SELECT DISTINCT episode FROM faults WHERE fault = ?", (fault,))}

    def agent_costs(self, episodes: Collection[str] | None = None) -> list[AgentCost]:
        """Model calls, tokens and latency per agent, over every episode or, given `episodes`, over those; a fork's,
        the calls it made (its live part), not those of the history it copied."""
        return [cost for _, cost in self._costs("agent", episodes, self._live_starts(episodes))]

    def episode_costs(self, episodes: Collection[str] | None = None) -> dict[str, list[AgentCost]]:
        """As `agent_costs`, for each episode apart (by episode id, then agent): what spreads over episodes
        (FAMA's tokens per episode) needs each one's."""
        return self._episode_costs(episodes, self._live_starts(episodes))

    def _episode_costs(self, episodes: Collection[str] | None, live: Mapping[str, int]) -> dict[str, list[AgentCost]]:
        found: dict[str, list[AgentCost]] = {}
        for episode, cost in self._costs("episode, agent", episodes, live):
            found.setdefault(episode, []).append(cost)
        return found

    def _costs(
        self, group: Literal["agent", "episode, agent"], episodes: Collection[str] | None, live: Mapping[str, int]
    ) -> Iterator[tuple[str, AgentCost]]:
        """The model calls of `episodes` summed by `group`; a fork's from where its live part begins (`live`)."""
        named = "" if episodes is None else " AND episode IN (SELECT value FROM json_each(?))"
        params: tuple[str, ...] = (msgspec.json.encode(live).decode(),)
        if episodes is not None:
            params += (msgspec.json.encode(sorted(episodes)).decode(),)
        cursor = self._query(
            "WITH live(episode, start) AS (SELECT key, value FROM json_each(?))"
            " SELECT min(episode), agent, count(DISTINCT episode), count(*), coalesce(sum(prompt_tokens), 0),"
            " coalesce(sum(completion_tokens), 0), coalesce(sum(latency_s), 0.0), coalesce(group_concat(DISTINCT model), '')"
            f" FROM model_calls LEFT JOIN live USING (episode) WHERE pos >= coalesce(live.start, 0){named}"
            f" GROUP BY {group} ORDER BY {group}",
            params,
        )
        names = AgentCost.__struct_fields__
        for episode, *values in cursor:
            yield episode, AgentCost(**dict(zip(names, values, strict=True)))

    def episode(self, episode: str) -> EpisodeSummary | None:
        cursor = self._query(f"SELECT {_EPISODE_SELECT} FROM episodes WHERE episode = ?", (episode,))
        values = cursor.fetchone()
        if values is None:
            return None
        return self._as_ran([EpisodeSummary(**dict(zip(EpisodeSummary.__struct_fields__, values, strict=True)))])[0]

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        self._conn.close()


class JournalReader:
    """A read-only view of a journal: one file, or a journal set (`_set`) read as one journal.

    Raises JournalError if a file is missing or not a journal. `expand_requests=False` yields
    model recordings in their stored form (see `JournalRow`), which costs nothing to read; rows
    read that way must not be copied into another journal. `version` is the lowest schema
    version among the files.

    A row's `pos` is its place in its own file: a set has no positions across files, so
    `row(pos)` and `rows(start)` past the first row are for single files. A set's rows come in
    stream order, and an episode's rows always from the one shard that holds it. In a set written
    by cells, each shard's controls and dead letters (`CELL_EPISODES`) are its own: those two
    episodes are read from every shard, a shard's rows after another's.
    """

    def __init__(
        self, path: str | Path, settings: JournalSettings | None = None, *, expand_requests: bool = True
    ) -> None:
        self.path = Path(path)
        self._files: list[_FileReader] = []
        try:
            for file in journal_files(self.path):
                self._files.append(_FileReader(file, settings, expand_requests=expand_requests))
        except BaseException:
            self.close()
            raise
        self.version = min(file.version for file in self._files)
        self._manifest = read_manifest(self.path) if self.shards > 1 else SetManifest(shards=1)
        self._in_every_shard = CELL_EPISODES if self._manifest.cells else frozenset()

    @property
    def shards(self) -> int:
        """How many files the journal has (1 unless it is a set)."""
        return len(self._files)

    @property
    def files(self) -> list[Path]:
        return [file.path for file in self._files]

    def _single(self, what: str) -> _FileReader:
        if len(self._files) == 1:
            return self._files[0]
        raise JournalError(
            f"{self.path}: a journal set of {len(self._files)} shards has no positions across its files, so"
            f" {what} needs one of them: give the shard's file ({self._files[0].path.name} ...)"
        )

    def _of(self, episode: str) -> _FileReader:
        return self._files[self._manifest.shard_of(episode)]

    def _holding(self, episode: str) -> list[_FileReader]:
        """The files that hold `episode`'s rows: its shard's, or every shard's for a cell's controls and dead letters."""
        return self._files if episode in self._in_every_shard else [self._of(episode)]

    # -- positions -----------------------------------------------------------------------------

    @property
    def last_pos(self) -> int:
        """Rows in the journal (the last position of a single file); read anew each time."""
        return sum(file.last_pos for file in self._files)

    @property
    def head(self) -> str:
        """Chain value of the last row (GENESIS when empty); a set's is the digest of its shards' heads."""
        if len(self._files) == 1:
            return self._files[0].head
        return digest(" ".join(file.head for file in self._files).encode())

    def row(self, pos: int, *, episode: str = "") -> JournalRow:
        """The row at `pos`; in a set, at `pos` of the file that holds `episode` (an `EpisodeSummary`'s positions)."""
        return (self._of(episode) if episode else self._single("a row by position")).row(pos)

    # -- scans ---------------------------------------------------------------------------------

    def rows(self, start: int = 1, stop: int | None = None) -> Iterator[JournalRow]:
        """Rows with start <= pos (< stop), in position order, streamed from one scan; a set's all in stream order
        (of cells, whose streams are each their own, each shard's in its order, the shards' by their times)."""
        if len(self._files) > 1 and start == 1 and stop is None:
            return heapq.merge(*(file.rows() for file in self._files), key=self._order)
        return self._single("reading from a position").rows(start, stop)

    def tail(self, n: int) -> list[JournalRow]:
        """The last `n` rows, oldest first (in `rows`' order)."""
        if len(self._files) == 1:
            return self._files[0].tail(n)
        return list(heapq.merge(*(file.tail(n) for file in self._files), key=self._order))[-n:] if n > 0 else []

    @property
    def _order(self) -> Callable[[JournalRow], tuple[float, int]]:
        """How a set's shards' rows interleave: by stream sequence, or for cells' by time (their sequences are each
        their own stream's)."""
        return _time_order if self._manifest.cells else _stream_order

    def has_episode(self, episode: str) -> bool:
        """Whether any row belongs to `episode` (one lookup in the episode index)."""
        return any(file.has_episode(episode) for file in self._holding(episode))

    def check_episodes(self, episodes: Iterable[str]) -> None:
        """JournalError, naming each, where the journal lacks some of `episodes`: a command asked for an episode
        that is not there fails, where it would do nothing and report success."""
        missing = [episode for episode in dict.fromkeys(episodes) if not self.has_episode(episode)]
        if missing:
            names = ", ".join(repr(episode) for episode in missing)
            raise JournalError(f"{self.path}: no episode {names}; `faultline journal episodes {self.path}` lists them")

    def check_runs(self, runs: Iterable[str]) -> None:
        """JournalError, naming each, where the journal holds no episode of some of `runs` (`of_run`)."""
        missing = [run for run in dict.fromkeys(runs) if not self.of_run(run)]
        if missing:
            names = ", ".join(repr(run) for run in missing)
            raise JournalError(
                f"{self.path}: no episode of run {names} (the run an episode's start records; for one journaled"
                f" before starts recorded it, the run its id begins with); `faultline journal episodes {self.path}`"
                " lists them"
            )

    def episode_rows(self, episode: str, start: int = 1, *, beside: str = "") -> Iterator[JournalRow]:
        """One episode's rows from position `start` (in its file) on, in position order; with `beside`, only those
        in the file that holds episode `beside` (a cell's own controls, whose positions compare with its)."""
        if beside and episode in self._in_every_shard:
            return self._of(beside).episode_rows(episode, start)
        holding = self._holding(episode)
        if len(holding) > 1 and start > 1:
            self._single("reading controls or dead letters from a position")
        return itertools.chain.from_iterable(file.episode_rows(episode, start) for file in holding)

    def by_episode(self, episodes: Iterable[str] | None = None) -> Iterator[tuple[str, list[JournalRow]]]:
        """(episode, its rows in position order) for every episode (by id), or the ones named.

        One scan of each file's (episode, pos) index, so memory holds one episode at a time:
        the way to replay thousands of episodes.
        """
        if len(self._files) == 1:
            return self._files[0].by_episode(episodes)
        if episodes is None:
            merged = heapq.merge(*(file.by_episode() for file in self._files), key=lambda item: item[0])
            if not self._in_every_shard:
                return merged
            return (  # a cell's controls and dead letters come from every shard: one item each, as in a single file
                (episode, [row for _, rows in items for row in rows])
                for episode, items in itertools.groupby(merged, key=lambda item: item[0])
            )
        return ((episode, list(self.episode_rows(episode))) for episode in episodes)

    # -- derived views -------------------------------------------------------------------------

    def episodes(self) -> list[EpisodeSummary]:
        """Every episode that has a started or completed event, in order of first appearance."""
        if len(self._files) == 1:
            return self._files[0].episodes()
        return sorted((e for file in self._files for e in file.episodes()), key=lambda e: (e.first_ts, e.episode))

    def domains(self) -> dict[str, str]:
        """The episodes `episodes()` lists, each with its domain ("" for none), by id: what planning a
        replay needs, read from the kind index without the counts that `episodes()` computes over every row."""
        found: dict[str, str] = {}
        for file in self._files:
            found.update(file.domains())
        return dict(sorted(found.items()))

    def runs(self) -> dict[str, str]:
        """Each episode whose start records its run (`EpisodeStarted.run`), with that run, by id: those journaled
        before starts recorded their run are not in it."""
        found: dict[str, str] = {}
        for file in self._files:
            found.update(file.runs())
        return dict(sorted(found.items()))

    def forks(self) -> set[str]:
        """Every fork (`fork`): each episode whose start names the episode it was forked from."""
        return set().union(*(file.forks() for file in self._files))

    def of_run(self, run: str) -> list[str]:
        """The ids of run `run`'s episodes among those `episodes()` lists, sorted: each whose start records that
        run, a resumed run's retries included (they record the run they resume), and, where a start records no run
        (journaled before starts did), each whose id begins with `run`'s and "-" (`in_run`). A fork is of no run:
        its start keeps its source's run, and a fork into its source's journal is not one of the run's trials."""
        recorded, forks = self.runs(), self.forks()
        return [e for e in self.domains() if e not in forks and in_run(e, recorded.get(e, ""), run)]

    def select(self, wanted: EpisodeFilter) -> list[EpisodeSummary]:
        """The episodes `wanted` matches, in order of first appearance."""
        faulted: set[str] | None = None
        if wanted.fault is not None:
            faulted = set().union(*(file.faulted(wanted.fault) for file in self._files))
        members = None if wanted.run is None else set(self.of_run(wanted.run))
        return [
            e
            for e in self.episodes()
            if (wanted.status is None or e.outcome in _STATUS_OUTCOMES[wanted.status])
            and (wanted.task is None or e.task == wanted.task)
            and (wanted.domain is None or e.domain == wanted.domain)
            and (faulted is None or e.episode in faulted)
            and (wanted.since is None or e.first_ts >= wanted.since)
            and (members is None or e.episode in members)
        ]

    def agent_costs(self, episodes: Collection[str] | None = None) -> list[AgentCost]:
        """Model calls, tokens and latency per agent, over every episode or, given `episodes`, over those (a run's:
        `of_run`); a fork's are the calls it made, its live part's, not those of the history it copied."""
        if len(self._files) == 1:
            return self._files[0].agent_costs(episodes)
        by_agent: dict[str, list[AgentCost]] = {}
        for file in self._files:
            for cost in file.agent_costs(episodes):
                by_agent.setdefault(cost.agent, []).append(cost)
        return [_summed(agent, costs) for agent, costs in sorted(by_agent.items())]

    def episode_costs(self, episodes: Collection[str] | None = None) -> dict[str, list[AgentCost]]:
        """As `agent_costs`, for each episode apart (by episode id, then agent): what spreads over episodes
        (FAMA's tokens per episode) needs each one's."""
        found: dict[str, list[AgentCost]] = {}
        for file in self._files:
            found.update(file.episode_costs(episodes))
        return dict(sorted(found.items()))

    def episode(self, episode: str) -> EpisodeSummary | None:
        return self._of(episode).episode(episode)

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        for file in self._files:
            file.close()

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _run_of(body: bytes) -> str:
    """The run an episode-started body records; "" for none, and for a body this version cannot read."""
    try:
        return _recorded_run.decode(body).run
    except msgspec.DecodeError:  # a ValidationError too
        return ""


def _stream_order(row: JournalRow) -> tuple[float, int]:
    return 0.0, row.stream_seq


def _time_order(row: JournalRow) -> tuple[float, int]:
    return row.ts, row.stream_seq


def _summed(agent: str, costs: list[AgentCost]) -> AgentCost:
    """One agent's costs over several shards, whose episodes are disjoint."""
    models = sorted({m for cost in costs for m in cost.models.split(",") if m})
    return AgentCost(
        agent=agent,
        episodes=sum(c.episodes for c in costs),
        calls=sum(c.calls for c in costs),
        prompt_tokens=sum(c.prompt_tokens for c in costs),
        completion_tokens=sum(c.completion_tokens for c in costs),
        latency_s=sum(c.latency_s for c in costs),
        models=",".join(models),
    )


def check_journal_target(path: Path, shards: int = 1, *, cells: bool = False) -> None:
    """JournalError, in one line, when a system could not write its journal (with `shards` above 1, a set's folder,
    written by `cells` or not) at `path`: said before any process starts, where the journal service's log alone
    would say it after."""
    if is_journal_set(path):  # written with another count, its episodes would move to other shards
        set_of(path, shards, cells=cells)
    if shards > 1:
        if path.exists() and not path.is_dir():
            raise JournalError(f"{path}: is not a folder, so not a journal set of {shards} shards")
        return
    if path.exists() and not path.is_file():
        raise JournalError(not_a_file(path, "a journal file"))
    if path.is_file() and path.stat().st_size:
        JournalReader(path).close()  # "not a Faultline journal", a schema newer than this Faultline, ...
