"""Each attribution method on an episode whose answer the test knows, and what attribution leaves alone."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from faultline.api import SIM_NOTE, attribute, failed_episodes
from faultline.cli import _text as cli_text
from faultline.cli import main
from faultline.core import LlmRequest, LlmResponse
from faultline.envs import EARLY_STOP, load_domain
from faultline.journal import JournalReader, JournalRow
from faultline.replay import (
    FAULT_REPAIR,
    ORACLE_REPAIR,
    SAMPLED,
    Inject,
    Probe,
    attribute_episode,
    fork_episode,
    largest_rise,
    steps,
    wilson,
)
from faultline.runtime import Config, agent_lookup, make_backend
from faultline.runtime.models import OpenAIBackend, SimBackend
from tests.openai_server import OpenAIServer, Text
from tests.replay.sim_labels import decisions

CONFIG = Config()
LOOKUP = agent_lookup(CONFIG)


def sim(role: str) -> Any:
    return make_backend(CONFIG, role)


class NoMistakes:
    """The simulator with its per-step mistake rate set by the test (here 0) for every live call."""

    model = "sim"

    async def complete(self, request: LlmRequest) -> LlmResponse:
        metadata = (
            {**request.metadata, "error_rates": {}} if request.metadata.get("sim") == "tool" else request.metadata
        )
        return SimBackend().respond(msgspec.structs.replace(request, metadata=metadata))

    async def aclose(self) -> None:
        return None


def rows_of(journal: Path, episode: str) -> list[JournalRow]:
    with JournalReader(journal) as reader:
        return list(reader.episode_rows(episode))


def one_mistake(journal: Path, category: str | None = None) -> tuple[str, list[int]]:
    """A failed episode with a single simulated mistake: its id and the tool decisions carrying it."""
    with JournalReader(journal) as reader:
        for summary in reader.episodes():
            if summary.outcome != "failure":
                continue
            made = decisions(list(reader.episode_rows(summary.episode)), "tool")
            carrying = [d for d in made if d.mistake]
            kinds = {json.dumps(d.mistake, sort_keys=True) for d in carrying}
            if len(kinds) == 1 and (category is None or carrying[0].mistake["category"] == category):  # type: ignore[index]
                task = load_domain("retail").task(summary.task or "")
                last = len(task.actions) - 1
                if category is None or (carrying[0].mistake["step"] == last and not task.outputs):  # type: ignore[index]
                    return summary.episode, [d.recording_pos for d in carrying]
    raise AssertionError("the sim journal has no such episode")


def step_of(journal: Path, episode: str, recording_pos: int) -> int:
    rows = rows_of(journal, episode)
    cause = next(r.causation for r in rows if r.pos == recording_pos)
    return next(s.index for s in steps(rows, LOOKUP) if s.agent == "tool" and s.input_id == cause)


def test_fault_event_repair_finds_the_injected_fault_and_writes_only_forks(
    faultless_journal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with JournalReader(faultless_journal) as reader:
        passed = next(s.episode for s in reader.episodes() if s.outcome == "success" and s.task.startswith("cancel"))
    rows = rows_of(faultless_journal, passed)
    call = next(r for r in rows if r.kind == "tool_call" and r.sender == "tool")
    labelled = tmp_path / "labelled.sqlite"
    injected = anyio.run(
        lambda: fork_episode(
            faultless_journal,
            passed,
            call.pos,
            Inject(fault="cycle"),
            lookup=LOOKUP,
            backends=sim,
            out=labelled,
        )
    )
    assert injected.outcome.outcome == "failure"
    expected = next(s for s in steps(rows, LOOKUP) if s.input_id == call.causation and s.agent == "tool")
    with JournalReader(labelled) as reader:
        before = list(reader.rows())
    forks = tmp_path / "forks.sqlite"
    args = ["attribute", str(labelled), "-e", injected.episode, "--method", "fault", "--out", str(forks), "--json"]
    assert main(args) == 0
    [result, summary] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert result["type"] == "episode" and summary["type"] == "summary"
    assert (result["method"], result["agent"], result["step"], result["fault"]) == (
        FAULT_REPAIR,
        "tool",
        expected.index,
        "cycle",
    )
    assert result["decided"] and result["flipped"] and summary["flip_rate"] == 1.0
    assert summary["note"] == SIM_NOTE, "forks on sim say what their numbers measure"
    [probe, control] = result["evidence"]
    assert probe["change"] == "undo_fault" and [f["outcome"] for f in probe["forks"]] == ["success"] * 8
    # The control keeps the fault and draws the rest again: it fails as the episode did, so the undo decided.
    assert control["change"] == "keep" and [f["outcome"] for f in control["forks"]] == ["failure"] * 8
    assert result["search"].endswith("8 of 8 repaired continuations succeeded, 0 of 8 of the control's: decided")
    with JournalReader(labelled) as reader:
        assert list(reader.rows()) == before
    with JournalReader(forks) as reader:
        assert {s.episode for s in reader.episodes()} == {f["fork"] for p in (probe, control) for f in p["forks"]}
    assert main(["replay", str(forks)]) == 0


def test_fault_event_repair_finds_a_semantic_fault_on_what_the_user_said(
    faultless_journal: Path, tmp_path: Path
) -> None:
    """The injector changes the order id in the user's answer; the agent cancels what it was told, and fails."""
    with JournalReader(faultless_journal) as reader:
        cancels = [s.episode for s in reader.episodes() if s.outcome == "success" and s.task.startswith("cancel")]
    passed, reveal = next(
        (episode, r)
        for episode in cancels
        for r in rows_of(faultless_journal, episode)
        if r.kind == "user_turn" and "order id is #" in getattr(r.envelope().body, "text", "")
    )
    labelled = tmp_path / "labelled.sqlite"
    injected = anyio.run(
        lambda: fork_episode(
            faultless_journal,
            passed,
            reveal.pos,
            Inject(fault="hallucination"),
            lookup=LOOKUP,
            backends=sim,
            out=labelled,
        )
    )
    assert injected.outcome.outcome == "failure"
    rows = rows_of(faultless_journal, passed)
    expected = next(s for s in steps(rows, LOOKUP) if s.input_id == reveal.causation and s.agent == "user")
    result = anyio.run(
        lambda: attribute_episode(
            labelled, injected.episode, lookup=LOOKUP, backends=sim, method=FAULT_REPAIR, scratch=tmp_path / "f.sqlite"
        )
    )
    assert (result.agent, result.step, result.fault, result.decided) == ("user", expected.index, "hallucination", True)


def test_oracle_repair_through_the_openai_backend(
    journal_copy: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    episode, carrying = one_mistake(journal_copy, EARLY_STOP)
    openai_server.fallback = lambda body: Text("Thank you, goodbye. ###STOP###")
    result = anyio.run(
        lambda: attribute_episode(
            journal_copy,
            episode,
            lookup=LOOKUP,
            backends=lambda role: OpenAIBackend(openai_server.settings()),
            method=ORACLE_REPAIR,
            scratch=tmp_path / "forks.sqlite",
        )
    )
    assert main(["replay", str(tmp_path / "forks.sqlite")]) == 0, "the answers the runtime gave replay"
    assert (result.method, result.agent, result.category) == (ORACLE_REPAIR, "tool", EARLY_STOP)
    assert result.step == step_of(journal_copy, episode, carrying[-1]) and result.decided
    assert result.right is not None and result.right["name"] == "cancel_pending_order"
    assert openai_server.chat_requests, "the continuation after the repaired step ran on the openai backend"
    *earlier, rescued, control = result.evidence
    assert all(f.outcome == "failure" for p in earlier for f in p.forks)
    assert rescued.change == "oracle" and rescued.successes == rescued.samples == 8
    # The control keeps the step's own answer and draws the rest again: it fails as the episode did.
    assert control.change in ("keep", "recorded") and control.successes == 0


async def test_sampled_counterfactuals_find_where_success_becomes_possible(journal_copy: Path, tmp_path: Path) -> None:
    episode, carrying = one_mistake(journal_copy)
    result = await attribute_episode(
        journal_copy,
        episode,
        lookup=LOOKUP,
        backends=lambda role: NoMistakes(),
        method=SAMPLED,
        samples=6,
        scratch=tmp_path / "forks.sqlite",
    )
    assert (result.method, result.agent, result.step) == (SAMPLED, "tool", step_of(journal_copy, episode, carrying[-1]))
    assert result.decided and result.p == 1.0 and result.p_after == 0.0
    assert result.low is not None and result.high_after is not None and result.low > result.high_after
    assert result.search.startswith("backward scan") and result.forks == sum(p.samples for p in result.evidence)
    named, after = (next(p for p in result.evidence if p.step == k) for k in (result.step, result.step + 1))
    assert named.samples == after.samples == 6, "the step named and the next get every sample"
    assert {p.samples for p in result.evidence} - {6} <= {1}, "the search probes with one"


async def test_one_sample_per_step_leaves_the_step_undecided(journal_copy: Path, tmp_path: Path) -> None:
    episode, carrying = one_mistake(journal_copy)
    rows = rows_of(journal_copy, episode)
    result = await attribute_episode(
        journal_copy,
        episode,
        lookup=LOOKUP,
        backends=lambda role: NoMistakes(),
        method=SAMPLED,
        samples=1,
        scratch=tmp_path / "forks.sqlite",
    )
    assert result.step is not None and result.step < len(steps(rows, LOOKUP))
    assert not result.decided and result.flipped
    assert result.low is not None and result.high_after is not None and result.low < result.high_after


def test_attribution_tells_its_progress_after_each_episode(
    sim_journal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = failed_episodes(sim_journal)[:2]
    assert len(failed) == 2, "the sim journal holds failures"
    told: list[tuple[int, int]] = []
    answers = attribute(
        sim_journal, failed, method=FAULT_REPAIR, scratch=tmp_path / "forks.sqlite", progress=lambda *p: told.append(p)
    )
    assert [a.episode for a in answers] == failed and told == [(1, 2), (2, 2)]
    monkeypatch.setattr(cli_text, "PROGRESS_LINE_S", 0.0)
    args = ["attribute", str(sim_journal), *("-e", failed[0], "-e", failed[1]), "--method", "fault"]
    assert main([*args, "--out", str(tmp_path / "more.sqlite")]) == 0
    assert capsys.readouterr().err.splitlines() == ["1 of 2 episodes attributed", "2 of 2 episodes attributed"]


def test_a_successful_episode_has_nothing_to_attribute(journal_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with JournalReader(journal_copy) as reader:
        ok = next(s.episode for s in reader.episodes() if s.outcome == "success")
    assert main(["attribute", str(journal_copy), "--episode", ok]) == 1
    assert "succeeded: there is no failure to attribute" in capsys.readouterr().err


def curve(values: list[float], samples: int = 8) -> Callable[[int], Awaitable[Probe]]:
    """p(k) = values[k - 1] from `samples` forks each (after the last step: 0, the recorded failure)."""

    async def p(k: int) -> Probe:
        wins = round(values[k - 1] * samples) if k <= len(values) else 0
        low, high = wilson(wins, samples)
        return Probe(step=k, agent="a", position=k, change="keep", successes=wins, samples=samples, low=low, high=high)

    return p


@pytest.mark.parametrize(
    ("values", "found"),
    [
        ([1, 1, 0.875, 0.125, 0], 3),  # the largest rise, not the last step with any success
        ([1, 1, 1, 1, 0], 4),
        ([0.125, 0, 1, 0, 0], 3),  # p rises again later: what lies before does not matter
        ([0, 0, 0], None),  # no step rescues it
    ],
)
async def test_the_search_finds_the_step_where_p_rises_most(values: list[float], found: int | None) -> None:
    assert await largest_rise(curve(values), len(values)) == found


async def test_the_search_probes_from_the_end_and_stops_past_the_first_step_that_rescues() -> None:
    asked: list[int] = []
    values = curve([0.5, 1, 1, 0, 0])

    async def p(k: int) -> Probe:
        asked.append(k)
        return await values(k)

    assert await largest_rise(p, 5) == 3
    assert asked == [6, 5, 4, 3, 2], "the first steps, whose continuations are the longest, are never probed"
