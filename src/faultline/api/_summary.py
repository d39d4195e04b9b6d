"""What a run's result says: pass^k, outcomes, latencies, and what its agents' model calls cost."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from faultline.api._overhead import TokenOverhead, token_overhead
from faultline.api._plan import RunResult
from faultline.core import helper_agent
from faultline.runtime import stall_of

if TYPE_CHECKING:
    from faultline.journal import AgentCost


def pass_hat_k(tasks: Sequence[tuple[int, int]], k: int) -> float:
    """pass^k: mean over tasks of C(c, k) / C(n, k), for each task's (c successes, n completed trials).

    A task with fewer than k completed trials (a run cut short) says nothing of pass^k and is
    left out; NaN when no task has k.
    """
    counted = [(c, n) for c, n in tasks if n >= k]
    if not counted:
        return math.nan
    return sum(math.comb(c, k) / math.comb(n, k) for c, n in counted) / len(counted)


class AgentCostRow(msgspec.Struct, frozen=True, kw_only=True):
    """One agent's model use per episode of a run: calls, tokens in and out, model latency."""

    agent: str
    calls: float
    prompt_tokens: float
    completion_tokens: float
    latency_s: float

    @property
    def tokens(self) -> float:
        return self.prompt_tokens + self.completion_tokens


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    episodes: int
    tasks: int
    trials: int
    pass_k: dict[int, float]
    outcomes: dict[str, int]
    avg_turns: float
    avg_tokens: float
    avg_latency_s: float
    """Averages over the `tallied` episodes (tokens: see `tokens_from_calls`): those whose completion reports turns, tokens or latency. The runner's
    own completions (a timeout, the error after a handler raised) report none, and counting them as 0 would drag
    the averages down."""
    tallied: int = 0
    tokens_from_calls: bool = False
    """Whether `avg_tokens` counts every agent's model calls the journal holds, per episode of the run (runs with
    helpers, systems of one's own), rather than what the completions tallied (the tool agent's and the user's)."""
    seconds: float
    episodes_per_s: float
    """Episodes completed per second of `seconds`, the time from the first start to the last completion."""
    journal_wait_s: float = 0.0
    """How long the run then waited for the journal to hold every message: the journal's lag behind the run. Seconds
    of it mean the journal did not keep up, and `episodes_per_s` is more than the journal can hold for long."""
    journal: str = ""
    not_run: int = 0
    """Planned episodes that did not complete (a run cut short): left out of every number above."""
    cells: list[int] = []
    """A run in cells: the episodes completed in each cell, in cell order (empty for a run without cells)."""
    errors: dict[str, int] = {}
    """Causes of the episodes that ended in error, with how many ended with each."""
    stalled: dict[str, int] = {}
    """Causes of the episodes the runner ended stalled (counted as failures in `outcomes`), with how many ended with
    each."""
    costs: list[AgentCostRow] = []
    """Per agent, its model use per episode (from the journal; runs with helpers)."""
    helper_overhead: dict[str, float] = {}
    """Faultline's own measure: what the helpers' model calls add to the tool agent's, as fractions of
    the tool agent's prompt and completion tokens (`tokens`) and model latency (`latency`)."""
    overhead: TokenOverhead | None = None
    """The FAMA paper's (Table 2): the helpers' share of the tokens the tool agent and the helpers
    generated per episode, with their spread over the run's completed episodes (runs with helpers)."""
    note: str = ""
    """Where a model role was the offline simulator, that these numbers exercise the runtime, not a model."""


def summarize(result: RunResult, trials: int, journal: str = "") -> Summary:
    """The run's numbers over the episodes that completed: a run cut short counts none it did not finish."""
    per_task: dict[str, tuple[int, int]] = {}
    outcomes: dict[str, int] = defaultdict(int)
    errors: dict[str, int] = defaultdict(int)
    stalled: dict[str, int] = defaultdict(int)
    rows = result.outcomes()
    for planned, done in rows:
        c, n = per_task.get(planned.task, (0, 0))
        per_task[planned.task] = (c + int(done.outcome == "success"), n + 1)
        outcomes[done.outcome] += 1
        if done.outcome == "error":
            errors[done.cause] += 1
        elif stall_of(done) is not None:
            stalled[done.cause] += 1
    tasks = sorted({p.task for p in result.planned})
    tallied = [done for _, done in rows if done.turns or done.tokens or done.latency_s]
    n = max(len(tallied), 1)
    return Summary(
        episodes=len(rows),
        tasks=len(tasks),
        trials=trials,
        pass_k={k: pass_hat_k(list(per_task.values()), k) for k in range(1, trials + 1)},
        not_run=len(result.planned) - len(rows),
        outcomes=dict(outcomes),
        avg_turns=sum(d.turns for d in tallied) / n,
        avg_tokens=sum(d.tokens for d in tallied) / n,
        avg_latency_s=sum(d.latency_s for d in tallied) / n,
        tallied=len(tallied),
        seconds=result.seconds,
        episodes_per_s=len(rows) / result.seconds if result.seconds else 0.0,
        journal_wait_s=result.journal_wait_s,
        journal=journal,
        errors=dict(sorted(errors.items(), key=lambda item: -item[1])),
        stalled=dict(sorted(stalled.items(), key=lambda item: -item[1])),
    )


def with_costs(
    summary: Summary, journal: Path, run_id: str, roster: Sequence[str], episodes: Collection[str] | None = None
) -> Summary:
    """The summary with each agent's model use per episode, the helpers' overhead over the tool agent, and
    the FAMA paper's overhead over `episodes` (the run's completed ones; default: those with model calls)."""
    from faultline.journal import JournalReader  # SQLite tooling stays out of the run's hot path

    with JournalReader(journal) as reader:
        members = reader.of_run(run_id)
        costs = reader.agent_costs(episodes=members)
        by_episode = reader.episode_costs(episodes=members if episodes is None else set(members) & set(episodes))
    generated = {
        e: {c.agent: c.completion_tokens for c in by_episode.get(e, [])}
        for e in (by_episode if episodes is None else episodes)
    }
    overhead = token_overhead(generated, {helper_agent(entry) for entry in roster})
    return msgspec.structs.replace(costed(summary, costs, roster), overhead=overhead)


def with_model_tokens(summary: Summary, journal: Path, run_id: str) -> Summary:
    """The summary with its average tokens from the model calls journaled in the run: the scorer that grades a
    system of one's own sees none of its agents' calls, so its completions report no tokens."""
    from faultline.journal import JournalReader  # SQLite tooling stays out of the run's hot path

    with JournalReader(journal) as reader:
        costs = reader.agent_costs(episodes=reader.of_run(run_id))
    return msgspec.structs.replace(summary, avg_tokens=_all_agents_tokens(summary, costs), tokens_from_calls=True)


def _all_agents_tokens(summary: Summary, costs: Sequence[AgentCost]) -> float:
    """Every agent's model tokens per episode, the helpers' included: what `compare` and `fama loop` count too."""
    return sum(c.tokens for c in costs) / max(summary.episodes, 1)


def costed(summary: Summary, costs: Sequence[AgentCost], roster: Sequence[str]) -> Summary:
    """The summary with `costs` (sums over its episodes) per episode, and the helpers' overhead over the tool agent."""
    n = max(summary.episodes, 1)
    rows = [
        AgentCostRow(
            agent=c.agent,
            calls=c.calls / n,
            prompt_tokens=c.prompt_tokens / n,
            completion_tokens=c.completion_tokens / n,
            latency_s=c.latency_s / n,
        )
        for c in costs
    ]
    helpers = {helper_agent(entry) for entry in roster}
    tool = next((r for r in rows if r.agent == "tool"), None)
    extra = [r for r in rows if r.agent in helpers]
    overhead: dict[str, float] = {}
    if tool is not None and tool.tokens:
        overhead["tokens"] = sum(r.tokens for r in extra) / tool.tokens
    if tool is not None and tool.latency_s:
        overhead["latency"] = sum(r.latency_s for r in extra) / tool.latency_s
    summary = msgspec.structs.replace(summary, costs=rows, helper_overhead=overhead)
    if not costs:
        return summary
    return msgspec.structs.replace(summary, avg_tokens=_all_agents_tokens(summary, costs), tokens_from_calls=True)
