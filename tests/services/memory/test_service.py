"""The memory service against a real nats-server: entries from completed episodes, retrieval, errors."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import msgspec
import numpy as np
import pytest

from faultline._errors import MemoryStoreError
from faultline.bus import Bus, free_port
from faultline.core import Context, Envelope, EpisodeCompleted, Recorder, Recording, Start, encode
from faultline.runtime import MemoryConfig
from faultline.runtime.models import OpenAIBackend, OpenAIEmbedder, OpenAISettings
from faultline.services.memory import (
    MEMORY_AGENT,
    Dynamic,
    HashingEmbedder,
    MemoryService,
    MemoryServiceSettings,
    MemoryStore,
    RetrievalReply,
    RetrievalRequest,
    ToolCallRecord,
    ToolExchange,
    TopK,
    entry_from_episode,
    format_examples,
    memory_examples,
    retrieval_body,
    retrieval_mode,
    sim_reflection,
    wait_for_memory,
)
from faultline.services.memory._service import read_episode
from tests.openai_server import OpenAIServer, Text
from tests.services.memory.episodes import episode, mistake, sample_episodes

LOGGER = "faultline.services.memory._service"
FAST = MemoryServiceSettings(retry_delay_s=0.01, retry_delay_max_s=0.05, drain_timeout_s=5.0)


@asynccontextmanager
async def running(service: MemoryService) -> AsyncIterator[MemoryService]:
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await service.wait_ready()
        try:
            yield service
        finally:
            service.stop()


async def publish(bus: Bus, episodes: Sequence[list[Envelope]]) -> None:
    for envelopes in episodes:
        await bus.publish_all(envelopes)


async def ask(bus: Bus, body: object) -> dict:  # type: ignore[type-arg]
    payload = body if isinstance(body, bytes) else encode(body)
    reply = await bus.nc.request(bus.subjects.svc("memory"), payload, timeout=10)
    return msgspec.msgpack.decode(reply.data)  # type: ignore[no-any-return]


class BusServices:
    """The part of a worker that `ctx.request` needs."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    def backend_for(self, role: str) -> OpenAIBackend:
        raise AssertionError("no model call expected")

    async def request(self, service: str, payload: bytes, timeout_s: float) -> bytes:
        reply = await self.bus.nc.request(self.bus.subjects.svc(service), payload, timeout=timeout_s)
        return bytes(reply.data)


def tool_context(recorder: Recorder, services: BusServices | None) -> Context:
    start = Envelope(id="start-1", episode="now", sender="runner", recipient="tool", body=Start())
    return Context(agent="tool", message=start, recorder=recorder, services=services)


async def test_a_completed_episode_becomes_an_entry_that_retrieval_returns(bus: Bus) -> None:
    store = MemoryStore(":memory:", HashingEmbedder())
    episodes = sample_episodes()
    async with running(MemoryService(bus, store, settings=FAST)) as service:
        await publish(bus, episodes)
        with anyio.fail_after(20):
            await service.wait_until(lambda: service.handled == len(episodes))
        reply = await ask(bus, retrieval_body(domain="retail", query="cancel my order #W1", mode=TopK(k=2)))
    assert service.added == len(episodes) - 1, "the episode that ended in an error gives no entry"
    assert "ep-6" not in store
    failed = store.get("ep-2")
    assert failed is not None
    assert failed.feedback == 0
    assert failed.query == "Please cancel order #W7 because I ordered it by mistake"
    shown = [
        ToolExchange(call=ToolCallRecord(name="cancel_pending_order", arguments={"order_id": "#W1"}), response="ok")
    ]
    assert failed.reflection == sim_reflection(shown, "All done.")
    answer = msgspec.convert(reply, RetrievalReply)
    assert (answer.n, answer.reason) == (2, "top_k")
    assert answer.entries[0].entry == store.get("ep-1")
    assert {s.entry.domain for s in answer.entries} == {"retail"}
    assert answer.hidden_tools == []


async def test_the_tool_agents_examples_are_recorded_and_replay_without_the_service(bus: Bus) -> None:
    store = MemoryStore(":memory:", HashingEmbedder())
    services = BusServices(bus)
    live = Recorder(services=services)
    async with running(MemoryService(bus, store, settings=FAST)) as service:
        await publish(bus, sample_episodes())
        with anyio.fail_after(20):
            await wait_for_memory(bus)
        text, hidden = await memory_examples(
            tool_context(live, services), domain="retail", query="Cancel my order #W9 please", mode=TopK(k=3)
        )
        assert service.handled == len(sample_episodes())
    found = await store.retrieve("Cancel my order #W9 please", TopK(k=3), domain="retail")
    assert text == format_examples(found.entries)
    assert "work out what went wrong" in text and "Critique:" in text
    assert hidden == []
    [recording] = live.made
    assert (recording.call, recording.request["service"]) == ("request", "memory")
    replayed = Recorder(recorded={0: recording})
    again = await memory_examples(
        tool_context(replayed, None), domain="retail", query="Cancel my order #W9 please", mode=TopK(k=3)
    )
    assert again == (text, hidden)


async def test_hidden_tools_come_from_the_users_own_entries(bus: Bus) -> None:
    store = MemoryStore(":memory:", HashingEmbedder())
    booking = [("book_table", {"at": "19:00"}, "ok")]
    episodes = [
        episode("a1", query="Book a table for two at seven", calls=booking, reward=0.0, user="alice"),
        episode("a2", query="Book a table for four tonight", calls=booking, reward=0.0, user="alice"),
        episode("b1", query="Book a table for six", calls=booking, reward=0.0, user="bob"),
        episode("c1", query="Book a table for eight", calls=booking, reward=1.0, user="carol"),
    ]
    async with running(MemoryService(bus, store, settings=FAST)) as service:
        await publish(bus, episodes)
        with anyio.fail_after(20):
            await service.wait_until(lambda: service.handled == 4)
        hidden = {
            user: (await ask(bus, retrieval_body(domain="retail", query="Book a table", mode=TopK(), user=user)))[
                "hidden_tools"
            ]
            for user in ("alice", "bob", "carol", "")
        }
    assert hidden == {"alice": ["book_table"], "bob": ["book_table"], "carol": [], "": []}
    recurring = MemoryService(bus, store, settings=msgspec.structs.replace(FAST, min_zero_ratings=2))
    for user, expected in (("alice", ["book_table"]), ("bob", [])):
        reply = await recurring.retrieve(RetrievalRequest(query="Book a table", domain="retail", user=user))
        assert reply.hidden_tools == expected


async def test_dynamic_retrieval_over_the_bus(bus: Bus) -> None:
    store = MemoryStore(":memory:", HashingEmbedder())
    near = [episode(f"n{i}", query=f"Cancel my pending order number {i}") for i in range(6)]
    far = [episode(f"f{i}", query=f"Which phone plans include roaming in country {i}") for i in range(6)]
    mode = Dynamic(radius=2, fallback_k=1)
    async with running(MemoryService(bus, store, settings=FAST)) as service:
        await publish(bus, near + far)
        with anyio.fail_after(20):
            await service.wait_until(lambda: service.handled == 12)
        reply = await ask(bus, retrieval_body(domain="retail", query="Cancel my pending order", mode=mode))
    expected = await store.retrieve("Cancel my pending order", mode, domain="retail")
    assert reply["reason"] == expected.reason == "peak"
    assert reply["n"] == expected.n == 6
    assert [s["entry"]["id"] for s in reply["entries"]] == [s.entry.id for s in expected.entries]


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b"\xc1 not msgpack", "malformed memory request"),
        ({"domain": "retail"}, "missing required field `query`"),
        ({"query": 5}, "Expected `str`, got `int` - at `$.query`"),
        ({"query": "x", "mode": {"type": "top_k", "k": -1}}, "at `$.mode.k`"),
        ({"query": "x", "mode": {"type": "nearest"}}, "$.mode"),
    ],
)
async def test_a_malformed_request_gets_an_error_reply_and_the_service_keeps_serving(
    bus: Bus, payload: object, says: str
) -> None:
    store = MemoryStore(":memory:", HashingEmbedder())
    async with running(MemoryService(bus, store, settings=FAST)) as service:
        await publish(bus, [episode("ok", query="Cancel order #W1")])
        with anyio.fail_after(20):
            await service.wait_until(lambda: service.handled == 1)
        bad = await ask(bus, payload)
        good = await ask(bus, {"query": "cancel order", "domain": "retail"})
    assert set(bad) == {"error"}
    assert says in bad["error"]
    assert [s["entry"]["id"] for s in good["entries"]] == ["ok"]


async def test_a_request_that_fails_inside_the_service_is_answered_and_logged(
    bus: Bus, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = MemoryService(bus, MemoryStore(":memory:", HashingEmbedder()), settings=FAST)

    async def broken(request: RetrievalRequest) -> RetrievalReply:
        raise RuntimeError("index gone")

    monkeypatch.setattr(service, "retrieve", broken)
    caplog.set_level(logging.ERROR, logger=LOGGER)
    async with running(service):
        reply = await ask(bus, {"query": "cancel order", "domain": "retail"})
        again = await ask(bus, {"query": "cancel order", "domain": "retail"})
    assert reply == again == {"error": "internal error: RuntimeError: index gone"}
    failed = [r for r in caplog.records if r.name == LOGGER]
    assert [(r.levelno, r.getMessage()) for r in failed] == [
        (logging.ERROR, "memory: request on fl.svc.memory failed")
    ] * 2
    assert all(r.exc_info and r.exc_info[0] is RuntimeError for r in failed)


async def test_events_that_completed_while_the_service_was_down_are_not_missed(bus: Bus) -> None:
    store = MemoryStore(":memory:", HashingEmbedder())
    await publish(bus, [episode("before", query="Cancel order #W1")])
    async with running(MemoryService(bus, store, settings=FAST)) as service:
        with anyio.fail_after(20):
            await service.wait_until(lambda: "before" in store)
    timeout = Envelope(id="late-end", episode="before", sender="runner", body=EpisodeCompleted(outcome="timeout"))
    await publish(bus, [episode("while-down", query="Cancel order #W2"), [timeout]])
    async with running(MemoryService(bus, store, settings=FAST)) as service:
        with anyio.fail_after(20):
            state = await wait_for_memory(bus)
    assert state.caught_up
    assert service.handled == 2, "the second start resumes after what the first acknowledged"
    assert [e.id for e in store.entries()] == ["before", "while-down"]
    assert store.get("before") is not None and store.get("before").feedback == 1  # type: ignore[union-attr]


async def test_a_model_reflection_is_journaled_once_and_reused(bus: Bus, openai_server: OpenAIServer) -> None:
    openai_server.reply(Text("The agent cancelled #W1 although the user asked about #W7."))
    failed = episode(
        "m",
        query="Please cancel order #W7",
        reward=0.0,
        mistakes=[mistake(0)],
        calls=[("cancel_pending_order", {"order_id": "#W1"}, "ok")],
    )
    store = MemoryStore(":memory:", HashingEmbedder())
    async with OpenAIBackend(openai_server.settings()) as model:
        async with running(MemoryService(bus, store, extractor=model, settings=FAST)) as service:
            await publish(bus, [failed, episode("s", query="Cancel order #W2")])
            with anyio.fail_after(20):
                await service.wait_until(lambda: service.handled == 2)
        entry = store.get("m")
        assert entry is not None
        assert entry.reflection == "The agent cancelled #W1 although the user asked about #W7."
        assert len(openai_server.chat_requests) == 1, "successes get no reflection"
        prompt = openai_server.chat_requests[0]["messages"][1]["content"]
        assert "Please cancel order #W7" in prompt and "cancel_pending_order" in prompt
        [recorded] = [e for e in await read_episode(bus, "m", 5) if isinstance(e.body, Recording)]
        assert recorded.sender == MEMORY_AGENT and recorded.causation == failed[-1].id
        # A fresh memory with the same model finds the journaled exchange and asks nothing.
        fresh = MemoryStore(":memory:", HashingEmbedder())
        async with running(MemoryService(bus, fresh, extractor=model, settings=FAST)) as again:
            await again.ingest(failed[-1])
    assert fresh.get("m") == entry
    assert len(openai_server.chat_requests) == 1


async def test_the_preference_extractor_summarises_every_preference_episode(
    bus: Bus, openai_server: OpenAIServer
) -> None:
    openai_server.reply(Text("PREFERENCES\n- preferred tools: create_jira_issue\n- avoided tools: none"))
    ticket = [("create_jira_issue", {"title": "Login page is down"}, "ok")]
    earlier = [
        episode("p1", query="Open a ticket: the login page is down", calls=ticket, user="ann", ratings={}),
        episode("p2", query="Open a ticket: the login page is slow", calls=ticket, user="ben", ratings={}),
    ]
    liked = episode(
        "p3", query="Open a ticket: the login page is blank", calls=ticket, user="ann", ratings={"create_jira_issue": 1}
    )
    store = MemoryStore(":memory:", HashingEmbedder())
    async with OpenAIBackend(openai_server.settings()) as model:
        await store.add_many([entry for entry in map(entry_from_episode, earlier) if entry is not None])
        async with running(MemoryService(bus, store, extractor=model, settings=FAST)) as service:
            await publish(bus, [liked])
            with anyio.fail_after(20):
                await service.wait_until(lambda: service.handled == 1)
    entry = store.get("p3")
    assert entry is not None and entry.feedback == 1
    assert entry.reflection.startswith("PREFERENCES"), "a success of a preference task is summarised too"
    [request] = openai_server.chat_requests
    system, prompt = (m["content"] for m in request["messages"])
    assert "which tools a user likes" in system
    assert "login page is down" in prompt, "the user's own similar request is shown"
    assert "login page is slow" not in prompt, "another user's request is not"


async def test_with_the_extractor_off_the_model_is_never_asked(bus: Bus, openai_server: OpenAIServer) -> None:
    """Episodes whose run set `[memory] extractor = "off"`: a failure and a preference task's success are stored
    without a reflection, and the extractor model gets no request."""
    off = {"mode": "topk", "extractor": "off"}
    failed = episode("x1", query="Please cancel order #W7", reward=0.0, mistakes=[mistake(0)], memory=off)
    ticket = [("create_jira_issue", {"title": "Login page is down"}, "ok")]
    rated = episode("x2", query="Open a ticket: the login page is down", calls=ticket, user="ann", ratings={},
                    memory=off)  # fmt: skip
    store = MemoryStore(":memory:", HashingEmbedder())
    async with OpenAIBackend(openai_server.settings()) as model:
        async with running(MemoryService(bus, store, extractor=model, settings=FAST)) as service:
            await publish(bus, [failed, rated])
            with anyio.fail_after(20):
                await service.wait_until(lambda: service.handled == 2)
    assert openai_server.chat_requests == []
    assert [(e.id, e.feedback, e.reflection) for e in store.entries()] == [("x1", 0, ""), ("x2", 1, "")]
    assert not [e for e in await read_episode(bus, "x1", 5) if isinstance(e.body, Recording)], "nothing journaled"


class Switchable:
    """An embedder whose endpoint can be swapped, to bring an embeddings server back."""

    def __init__(self, current: OpenAIEmbedder) -> None:
        self.current = current
        self.name = current.name

    @property
    def dim(self) -> int:
        return self.current.dim

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return await self.current.embed(texts)


async def test_an_unreachable_embeddings_endpoint_loses_no_episode(
    bus: Bus, openai_server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    closed = openai_server.settings(base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
    async with OpenAIEmbedder(closed, dim=16) as down, OpenAIEmbedder(openai_server.settings(), dim=16) as up:
        embedder = Switchable(down)
        store = MemoryStore(":memory:", embedder)
        caplog.set_level(logging.WARNING, logger=LOGGER)
        async with running(MemoryService(bus, store, settings=FAST)) as service:
            await publish(bus, [episode("kept", query="Cancel order #W1")])
            with anyio.fail_after(20):
                await service.wait_until(lambda: service.failures >= 2)
            assert "kept" not in store
            assert "episode kept" in service.last_error and "cannot connect" in service.last_error
            reply = await ask(bus, {"query": "cancel", "domain": "retail"})
            assert reply["error"].startswith("ModelError: openai endpoint http://127.0.0.1:")
            embedder.current = up
            with anyio.fail_after(20):
                await service.wait_until(lambda: "kept" in store)
        assert service.handled == 1
        assert [e.id for e in store.entries()] == ["kept"]
    retries = [r for r in caplog.records if r.name == LOGGER]
    assert retries and all(r.levelno == logging.WARNING and getattr(r, "episode", None) == "kept" for r in retries)
    assert "the entry of episode kept is not written yet (attempt 1, will retry)" in retries[0].getMessage()


async def test_an_entry_that_failed_before_a_restart_is_written_after_it(bus: Bus, openai_server: OpenAIServer) -> None:
    closed = openai_server.settings(base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
    async with OpenAIEmbedder(closed, dim=16) as down, OpenAIEmbedder(openai_server.settings(), dim=16) as up:
        store = MemoryStore(":memory:", Switchable(down))
        async with running(MemoryService(bus, store, settings=FAST)) as service:
            await publish(bus, [episode("kept", query="Cancel order #W1"), episode("next", query="Cancel order #W2")])
            with anyio.fail_after(20):
                await service.wait_until(lambda: service.failures >= 1)
        assert len(store) == 0 and service.handled == 0
        restarted = MemoryStore(":memory:", Switchable(up))
        async with running(MemoryService(bus, restarted, settings=FAST)) as service:
            with anyio.fail_after(20):
                await service.wait_until(lambda: service.handled == 2)
    assert [e.id for e in restarted.entries()] == ["kept", "next"], "in completion order"


def test_retrieval_mode_from_the_config() -> None:
    assert retrieval_mode(MemoryConfig()) is None
    assert retrieval_mode(MemoryConfig(mode="topk", k=3)) == TopK(k=3)
    assert retrieval_mode({"mode": "dynamic", "radius": 2, "peak": 2}) == Dynamic(radius=2, peak=2)
    assert retrieval_mode(MemoryConfig(mode="dynamic")) == Dynamic()
    with pytest.raises(Exception, match="memory mode"):
        retrieval_mode({"mode": "sometimes"})
    with pytest.raises(Exception, match=r"\$.radius"):
        retrieval_mode({"mode": "dynamic", "radius": 0})


async def test_an_error_reply_is_raised_to_the_tool_agent(bus: Bus) -> None:
    closed = OpenAISettings(base_url=f"http://127.0.0.1:{free_port()}/v1", api_key_env="", model="m", max_retries=0)
    services = BusServices(bus)
    async with OpenAIEmbedder(closed, dim=16) as down:
        store = MemoryStore(":memory:", down)
        async with running(MemoryService(bus, store, settings=FAST)):
            with pytest.raises(MemoryStoreError, match="memory service: ModelError: openai endpoint .* cannot connect"):
                await memory_examples(
                    tool_context(Recorder(services=services), services), domain="retail", query="x", mode=TopK()
                )
