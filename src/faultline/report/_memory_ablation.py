"""MemToolAgent's ablation over run journals: pass rate and tool accuracy per memory setting.

Each episode of the built-in tool-use system records, in its started event, the `[memory]` settings
it ran with (the run's `EpisodeSpec.memory`: empty when memory was off). Episodes are grouped by the
settings that change what the tool agent is given (mode, k or the dynamic-n parameters, ranker,
zero_ratings) and by domain, whichever journal they are in, and each group is measured:

- pass rate: episodes that ended in success, over the group's completed episodes;
- tool accuracy (PEToolBench's, per episode): the share of episodes whose tool agent called exactly
  the tools its task's ground truth calls (the same set of names);
- parameter accuracy: the share of episodes where the agent made every ground-truth call with the
  ground truth's arguments;
- retrieval: the memory requests answered, the mean number of entries each returned, and the
  episodes where the memory hid tools the user rated 0 (hard preference guiding).

Calls are compared with the task's ground truth as the scorer does; nothing reads the simulator's
mistake labels. Forks are not episodes of a run and are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from faultline._errors import DomainError, JournalError
from faultline.core import EpisodeStarted, Recording, ToolCall
from faultline.envs import Domain, Task, load_domain
from faultline.journal import JournalReader, JournalRow

TOOL_AGENT = "tool"
MEMORY_SERVICE = "memory"


class MemorySetting(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The `[memory]` settings that change what the tool agent is given; those a mode does not read are left out."""

    mode: str
    k: int = 0
    """Top-k's k."""
    radius: int = 0
    prominence: float = 0.0
    peak: int = 0
    fallback_k: int = 0
    ranker: str = ""
    zero_ratings: int = 0

    @classmethod
    def of(cls, memory: Mapping[str, Any]) -> MemorySetting:
        """The setting of an episode's recorded `[memory]` table (empty or mode "off": memory off)."""
        mode = str(memory.get("mode", "off"))
        if mode == "off":
            return cls(mode="off")
        ranker, zero_ratings = str(memory.get("ranker", "similarity")), int(memory.get("zero_ratings", 1))
        if mode == "topk":
            return cls(mode=mode, k=int(memory.get("k", 0)), ranker=ranker, zero_ratings=zero_ratings)
        return cls(
            mode=mode,
            radius=int(memory.get("radius", 0)),
            prominence=float(memory.get("prominence", 0.0)),
            peak=int(memory.get("peak", 0)),
            fallback_k=int(memory.get("fallback_k", 0)),
            ranker=ranker,
            zero_ratings=zero_ratings,
        )

    @property
    def retrieval(self) -> str:
        """What is retrieved, in words: `off`, `top-k k=3`, `dynamic n (R 10, prominence 1e-05, peak 1)`."""
        if self.mode == "topk":
            return f"top-k k={self.k}"
        if self.mode == "dynamic":
            return f"dynamic n (R {self.radius}, prominence {self.prominence:g}, peak {self.peak})"
        return self.mode


class SettingRow(msgspec.Struct, frozen=True, kw_only=True):
    """One memory setting's episodes on one domain, over every journal that holds some, and what they did."""

    domain: str
    setting: MemorySetting
    journals: list[str]
    episodes: int
    successes: int
    pass_rate: float | None
    scored: int
    """Episodes whose task's ground truth could be read (a domain that loads, a task it has)."""
    right_tools: int
    right_arguments: int
    tool_accuracy: float | None
    param_accuracy: float | None
    retrievals: int
    retrieved: float | None
    """Mean entries per answered memory request."""
    hidden: int
    """Episodes where the memory hid tools from the tool agent."""


class MemoryAblation(msgspec.Struct, frozen=True, kw_only=True):
    rows: list[SettingRow]
    journals: list[str]
    skipped: int
    """Completed episodes left out: forks, and episodes of a system of one's own (which has no memory)."""
    models: list[str]
    """The tool agent's models, as the journals recorded them."""


class _Tally(msgspec.Struct, kw_only=True):
    journals: list[str] = []
    episodes: int = 0
    successes: int = 0
    scored: int = 0
    right_tools: int = 0
    right_arguments: int = 0
    retrievals: int = 0
    entries: int = 0
    hidden: int = 0


def _ratio(num: float, den: int) -> float | None:
    return num / den if den else None


def _task(started: EpisodeStarted, domains: dict[str, Domain | None]) -> Task | None:
    if started.domain not in domains:
        try:
            domains[started.domain] = load_domain(started.domain)
        except DomainError:
            domains[started.domain] = None
    domain = domains[started.domain]
    try:
        return domain.task(started.task) if domain is not None else None
    except DomainError:
        return None


def _count(tally: _Tally, rows: list[JournalRow], task: Task | None) -> None:
    """Add one episode's calls and retrievals to its setting's tally."""
    calls: list[ToolCall] = []
    hid = False
    for row in rows:
        if row.sender != TOOL_AGENT or row.kind not in ("tool_call", "recording"):
            continue
        body = row.envelope().body
        if isinstance(body, ToolCall):
            calls.append(body)
        elif isinstance(body, Recording) and body.call == "request" and not body.error:
            request, reply = body.request, body.response
            if isinstance(request, dict) and request.get("service") == MEMORY_SERVICE and isinstance(reply, dict):
                if "error" not in reply:
                    tally.retrievals += 1
                    tally.entries += len(reply.get("entries", []))
                    hid = hid or bool(reply.get("hidden_tools"))
    tally.hidden += hid
    if task is None:
        return
    tally.scored += 1
    tally.right_tools += {c.name for c in calls} == {a.name for a in task.actions}
    made = [(c.name, c.arguments) for c in calls]
    tally.right_arguments += all((a.name, a.arguments) in made for a in task.actions)


def memory_ablation(journals: Sequence[Path]) -> MemoryAblation:
    """Every (domain, memory setting) the journals' completed episodes ran with, in the order first met, and its
    measures.
    Raises JournalError for a file that is not a journal, or one with no episode of the built-in tool-use system."""
    tallies: dict[tuple[str, MemorySetting], _Tally] = {}
    domains: dict[str, Domain | None] = {}
    skipped = 0
    models: set[str] = set()
    for path in journals:
        with JournalReader(path, expand_requests=False) as reader:
            done = {e.episode: e for e in reader.episodes() if e.outcome is not None and not e.forked_from}
            models.update(m for c in reader.agent_costs() if c.agent == TOOL_AGENT for m in c.models.split(",") if m)
            counted = 0
            for episode, rows in reader.by_episode(list(done)):
                started = next((r.envelope().body for r in rows if r.kind == "episode_started"), None)
                if not isinstance(started, EpisodeStarted) or started.system or "memory" not in started.settings:
                    skipped += 1
                    continue
                setting = MemorySetting.of(started.settings["memory"])
                tally = tallies.setdefault((started.domain, setting), _Tally())
                if str(path) not in tally.journals:
                    tally.journals.append(str(path))
                tally.episodes += 1
                tally.successes += done[episode].outcome == "success"
                _count(tally, rows, _task(started, domains))
                counted += 1
        if not counted:
            raise JournalError(f"{path}: no completed episode of the built-in tool-use agents, whose memory this reads")
    return MemoryAblation(
        rows=[_row(domain, setting, t) for (domain, setting), t in tallies.items()],
        journals=[str(p) for p in journals],
        skipped=skipped,
        models=sorted(models),
    )


def _row(domain: str, setting: MemorySetting, t: _Tally) -> SettingRow:
    return SettingRow(
        domain=domain,
        setting=setting,
        journals=t.journals,
        episodes=t.episodes,
        successes=t.successes,
        pass_rate=_ratio(t.successes, t.episodes),
        scored=t.scored,
        right_tools=t.right_tools,
        right_arguments=t.right_arguments,
        tool_accuracy=_ratio(t.right_tools, t.scored),
        param_accuracy=_ratio(t.right_arguments, t.scored),
        retrievals=t.retrievals,
        retrieved=_ratio(t.entries, t.retrievals),
        hidden=t.hidden,
    )
