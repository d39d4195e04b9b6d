"""A worker shard's credential speaks and reads only in its own partitions.

With the subjects partitioned among a group's shards, each shard runs as an identity of its own. A plain
NATS client with shard 0's credential is refused, by the server, everything of the other shard's episodes:
speaking as its own agents there, completing them, its consumer, a read of their inputs or starts, and hearing
their completions. What is its own
stays open to it, and the system runs its episodes meanwhile.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
from nats.aio.msg import Msg

from faultline.api import RunPlan, plan_episodes, start_envelopes
from faultline.core import Envelope, EpisodeCompleted, ToolCall, encode, episode_shard
from faultline.runtime import (
    Completions,
    worker_identity,
)
from tests.runtime.live import EPISODE_TIMEOUT_S, configured_system, raw_client, retail

REFUSAL_TIMEOUT_S = 5.0


def _call(episode: str) -> bytes:
    body = ToolCall(call_id="forged", name="cancel_pending_order", arguments={"order_id": "#W0000000"})
    return encode(Envelope(id="forged-call", episode=episode, sender="tool", recipient="env", body=body))


def _completion(episode: str) -> bytes:
    body = EpisodeCompleted(outcome="failure", cause="forged")
    return encode(Envelope(id="forged-completion", episode=episode, sender="env", body=body))


async def test_a_shards_credential_is_refused_the_other_shards_episodes(tmp_path: Path) -> None:
    supervisor = configured_system(tmp_path, "[workers.main]\ncount = 2\n")
    plan = RunPlan(tasks=4, run_id="shards")
    planned = plan_episodes(plan, retail())
    by_shard = {k: [p.episode for p in planned if episode_shard(p.episode, 2) == k] for k in range(2)}
    assert by_shard[0] and by_shard[1], "four episodes fall in both partitions"
    theirs = by_shard[1][0]
    async with supervisor.running():
        bus = supervisor.bus
        assert bus is not None and bus.subjects.partitions == 2
        s, stream = bus.subjects, bus.subjects.stream
        me = worker_identity("main", 0, 2, 2)
        assert me == "worker-main-0of2"
        refusals: list[str] = []
        answers: list[bytes] = []
        refused = anyio.Event()

        async def on_error(exc: Exception) -> None:
            refusals.append(str(exc).lower())
            refused.set()

        async def on_answer(msg: Msg) -> None:
            answers.append(msg.data)

        raw = await raw_client(supervisor, me, error_cb=on_error)
        inbox = raw.new_inbox()
        await raw.subscribe(inbox, cb=on_answer)
        spy = {"name": "spy", "deliver_subject": f"_INBOX.{me}.spy", "filter_subject": s.direct(theirs, "tool")}
        trespasses = {
            s.direct(theirs, "env", "tool"): _call(theirs),
            s.event("completed", theirs, "env"): _completion(theirs),
            f"$JS.API.CONSUMER.INFO.{stream}.agent-tool-1of2": b"",
            f"$JS.API.CONSUMER.CREATE.{stream}.spy.{s.direct(theirs, 'tool')}": msgspec.json.encode(
                {"stream_name": stream, "config": spy}
            ),
            f"$JS.API.CONSUMER.CREATE.{stream}.spy.{s.event('started', theirs)}": msgspec.json.encode(
                {"stream_name": stream, "config": spy | {"filter_subject": s.event("started", theirs)}}
            ),
        }
        try:
            for subject, payload in trespasses.items():
                refused = anyio.Event()
                await raw.publish(subject, payload, reply=inbox)
                with anyio.fail_after(REFUSAL_TIMEOUT_S):
                    await refused.wait()
                assert refusals[-1] == f'nats: permissions violation for publish to "{subject}"'.lower()
            their_partition = s.in_shard(s.event("completed", "*"), 1, 2)[0]
            refused = anyio.Event()
            await raw.subscribe(their_partition)  # hearing the other shard's completions
            with anyio.fail_after(REFUSAL_TIMEOUT_S):
                await refused.wait()
            assert refusals[-1] == f'nats: permissions violation for subscription to "{their_partition}"'.lower()
            own = await raw.request(f"$JS.API.CONSUMER.INFO.{stream}.agent-tool-0of2", b"", timeout=REFUSAL_TIMEOUT_S)
            assert msgspec.json.decode(own.data)["name"] == "agent-tool-0of2"  # its own stays open to it
            await raw.flush()
        finally:
            await raw.close()
        assert len(refusals) == len(trespasses) + 1 and answers == []
        async with Completions(bus) as completions:
            await bus.publish_all(env for p in planned for env in start_envelopes(plan, p))
            with anyio.fail_after(EPISODE_TIMEOUT_S):
                done = await completions.wait([p.episode for p in planned])
        assert {episode: (c.outcome, c.cause) for episode, c in done.items()} == {
            p.episode: ("success", "") for p in planned
        }
