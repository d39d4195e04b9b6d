"""MemToolAgent's ablation over run journals: pass rate and tool accuracy per memory setting.

Each episode of the built-in tool-use system records, in its started event, the `[memory]` settings
it ran with (the run's `EpisodeSpec.memory`: empty when memory was off). Episodes are grouped by the
settings that change what the tool agent is given (mode, k or the dynamic-n parameters, ranker,
zero_ratings, and whether the memory extractor wrote reflections into the entries), by domain and by
the tool agent's model (as its recorded answers name it), whichever journal they are in, and each
group is measured:

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
from faultline.envs import Domain, Task, known_domain
from faultline.journal import JournalReader, JournalRow

TOOL_AGENT = "tool"
MEMORY_SERVICE = "memory"
UNKNOWN_MODEL = "unknown"
"""The model of an episode whose tool agent has no recorded answer."""


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
    extractor: str = ""
    """"on": entries carry the memory extractor's reflections; "off": they carry none (the paper's w/o extractor)."""

    @classmethod
    def of(cls, memory: Mapping[str, Any]) -> MemorySetting:
        """The setting of an episode's recorded `[memory]` table (empty or mode "off": memory off; no `extractor`
        key: an episode from before it could be switched off, so on)."""
        mode = str(memory.get("mode", "off"))
        if mode == "off":
            return cls(mode="off")
        on = cls(
            mode=mode,
            ranker=str(memory.get("ranker", "similarity")),
            zero_ratings=int(memory.get("zero_ratings", 1)),
            extractor=str(memory.get("extractor", "on")),
        )
        if mode == "topk":
            return msgspec.structs.replace(on, k=int(memory.get("k", 0)))
        return msgspec.structs.replace(
            on,
            radius=int(memory.get("radius", 0)),
            prominence=float(memory.get("prominence", 0.0)),
            peak=int(memory.get("peak", 0)),
            fallback_k=int(memory.get("fallback_k", 0)),
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
    """One memory setting's episodes on one domain with one model, over every journal that holds some, and what
    they did."""

    domain: str
    model: str
    """The model that answered the tool agent, as its recorded answers name it (`sim`, `scripted`, or the name an
    OpenAI-compatible endpoint answered with); several, joined by commas, when an episode had more than one."""
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
    """The tool agent's models in the episodes counted, as their recorded answers name them."""


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
    domain = known_domain(started.domain, domains)
    try:
        return domain.task(started.task) if domain is not None else None
    except DomainError:
        return None


class _ToolSide(msgspec.Struct, kw_only=True):
    """What one episode's rows show of its tool agent: the models that answered it, its calls, its memory replies."""

    models: set[str] = set()
    calls: list[ToolCall] = []
    replies: list[dict[str, Any]] = []

    @property
    def model(self) -> str:
        return ",".join(sorted(self.models)) or UNKNOWN_MODEL


def _tool_side(rows: list[JournalRow]) -> _ToolSide:
    side = _ToolSide()
    for row in rows:
        if row.sender != TOOL_AGENT or row.kind not in ("tool_call", "recording"):
            continue
        body = row.envelope().body
        if isinstance(body, ToolCall):
            side.calls.append(body)
        elif isinstance(body, Recording) and not body.error and isinstance(body.response, dict):
            if body.call == "llm" and body.response.get("model"):
                side.models.add(str(body.response["model"]))
            elif body.call == "request" and isinstance(body.request, dict):
                if body.request.get("service") == MEMORY_SERVICE and "error" not in body.response:
                    side.replies.append(body.response)
    return side


def _count(tally: _Tally, side: _ToolSide, task: Task | None) -> None:
    """Add one episode's calls and retrievals to its group's tally."""
    tally.retrievals += len(side.replies)
    tally.entries += sum(len(reply.get("entries", [])) for reply in side.replies)
    tally.hidden += any(reply.get("hidden_tools") for reply in side.replies)
    if task is None:
        return
    tally.scored += 1
    tally.right_tools += {c.name for c in side.calls} == {a.name for a in task.actions}
    made = [(c.name, c.arguments) for c in side.calls]
    tally.right_arguments += all((a.name, a.arguments) in made for a in task.actions)


def memory_ablation(journals: Sequence[Path]) -> MemoryAblation:
    """Every (domain, model, memory setting) the journals' completed episodes ran with, in the order first met, and
    its measures.
    Raises JournalError for a file that is not a journal, or one with no episode of the built-in tool-use system."""
    tallies: dict[tuple[str, str, MemorySetting], _Tally] = {}
    domains: dict[str, Domain | None] = {}
    skipped = 0
    models: set[str] = set()
    for path in journals:
        with JournalReader(path, expand_requests=False) as reader:
            done = {e.episode: e for e in reader.episodes() if e.outcome is not None and not e.forked_from}
            counted = 0
            for episode, rows in reader.by_episode(list(done)):
                started = next((r.envelope().body for r in rows if r.kind == "episode_started"), None)
                if not isinstance(started, EpisodeStarted) or started.system or "memory" not in started.settings:
                    skipped += 1
                    continue
                setting = MemorySetting.of(started.settings["memory"])
                side = _tool_side(rows)
                models.update(side.models)
                tally = tallies.setdefault((started.domain, side.model, setting), _Tally())
                if str(path) not in tally.journals:
                    tally.journals.append(str(path))
                tally.episodes += 1
                tally.successes += done[episode].outcome == "success"
                _count(tally, side, _task(started, domains))
                counted += 1
        if not counted:
            raise JournalError(f"{path}: no completed episode of the built-in tool-use agents, whose memory this reads")
    return MemoryAblation(
        rows=[_row(domain, model, setting, t) for (domain, model, setting), t in tallies.items()],
        journals=[str(p) for p in journals],
        skipped=skipped,
        models=sorted(models),
    )


def _row(domain: str, model: str, setting: MemorySetting, t: _Tally) -> SettingRow:
    return SettingRow(
        domain=domain,
        model=model,
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
