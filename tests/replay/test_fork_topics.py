"""A fork rebuilds every agent that took part before the fork point, a listener that only heard a topic included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from faultline.agent import Agent, Context, Envelope, Grade, InputRecord, Note, Start, System
from faultline.bus import EmbeddedServer
from faultline.cli import main
from faultline.journal import JournalReader
from faultline.replay import Drop, Keep, fork_episode
from faultline.runtime import Config, agent_lookup
from faultline.testing import run_system, scripted

NEWS = "news"


class Speaker(Agent):
    """Says the secret on the topic, then asks the listener for it directly, and finishes with its answer."""

    name = "speaker"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.publish(NEWS, Note(text=str(msg.body.data["secret"])))
            ctx.send("listener", Note(text="what was the secret?"))
        elif isinstance(msg.body, Note) and msg.sender == "listener":
            ctx.finish(msg.body.text)


class Listener(Agent):
    """Hears the topic, saying nothing; answers a direct question with what it heard."""

    name = "listener"
    topics = (NEWS,)

    def __init__(self) -> None:
        self.heard = "nothing"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if msg.topic == NEWS and isinstance(msg.body, Note):
            self.heard = msg.body.text
        elif msg.sender == "speaker":
            ctx.send("speaker", Note(text=self.heard))


class Gossip(System):
    name = "gossip"
    agents = (Speaker, Listener)
    entry = "speaker"
    finishers = ("speaker",)
    needs = ("secret",)

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0) if output == record.data["secret"] else Grade(0.0, f"the listener said {output!r}")


async def test_a_fork_after_a_topic_message_rebuilds_the_listener_that_only_heard_it(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Before the fork point the listener had heard the topic and sent nothing yet (its quiet marker comes later),
    so it was no sender or recipient there: the fork made it afresh, deaf to what it had heard, and a `--keep` fork
    of a success failed."""
    journal = tmp_path / "journal.sqlite"
    run = await run_system(
        Gossip, [{"secret": "42"}], nats_url=nats_server.url, journal=journal, models=scripted(lambda _r: "")
    )
    (planned,) = run.planned
    assert run.completed[planned.episode].outcome == "success"
    with JournalReader(journal) as reader:
        rows = list(reader.episode_rows(planned.episode))
    question = next(r for r in rows if r.recipient == "listener")
    assert not [r for r in rows if r.sender == "listener" and r.pos < question.pos]  # it had said nothing yet
    lookup = agent_lookup(Config())  # the runtime's agents (the scorer); the journal names the system's
    result = await fork_episode(
        journal, planned.episode, question.pos, Keep(), lookup=lookup, backends=lambda _role: scripted(lambda _r: "")
    )
    assert (result.outcome.outcome, result.outcome.cause) == ("success", "")


async def test_replaying_a_fork_that_dropped_an_agents_only_message_says_why_an_input_is_not_compared(
    nats_server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Dropping the listener's answer, all that its handling of the question sent, leaves the fork's journal no sign
    that it handled the question: replay cannot compare that input. It said "1 input(s) journaled after their
    agent's last handled one, not compared", which told a user neither why nor whether to act."""
    journal = tmp_path / "journal.sqlite"
    run = await run_system(
        Gossip, [{"secret": "42"}], nats_url=nats_server.url, journal=journal, models=scripted(lambda _r: "")
    )
    (planned,) = run.planned
    with JournalReader(journal) as reader:
        answer = next(r for r in reader.episode_rows(planned.episode) if r.sender == "listener" and r.recipient)
    result = await fork_episode(
        journal, planned.episode, answer.pos, Drop(), lookup=agent_lookup(Config()),
        backends=lambda _role: scripted(lambda _r: ""),
    )  # fmt: skip
    assert await anyio.to_thread.run_sync(main, ["replay", result.journal]) == 0
    out = capsys.readouterr().out
    assert out.startswith("identical: 1 episodes"), out
    assert "1 input(s) not replayed: the journal shows no handling of them to compare with" in " ".join(out.split())
