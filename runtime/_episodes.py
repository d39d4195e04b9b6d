"""Starting episodes and waiting for them to complete, from outside the agents."""

from __future__ import annotations

from collections.abc import Iterable

import anyio
from nats.aio.msg import Msg

from faultline.bus import Body, Bus, Envelope, EpisodeCompleted, EpisodeStarted, Start, decode_envelope, derive_id

RUNNER = "runner"


def started_envelope(episode: str, started: EpisodeStarted) -> Envelope:
    return Envelope(id=derive_id(episode, 0, "s"), episode=episode, sender=RUNNER, body=started)


def kickoff_envelope(episode: str, to: str, body: Body | None = None) -> Envelope:
    """The first message of an episode, sent by the runner to agent `to`."""
    return Envelope(
        id=derive_id(episode, 1, "s"),
        episode=episode,
        sender=RUNNER,
        recipient=to,
        body=body or Start(),  # type: ignore[arg-type]
        hops=0,
    )


async def start_episode(bus: Bus, episode: str, to: str, started: EpisodeStarted, body: Body | None = None) -> None:
    """Journal the episode's start, then hand the first message to agent `to`."""
    await bus.publish_all([started_envelope(episode, started), kickoff_envelope(episode, to, body)])


class Completions:
    """Collects `episode completed` events as they happen (first one per episode wins)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.done: dict[str, EpisodeCompleted] = {}
        self._changed = anyio.Event()
        self._sub = None

    async def __aenter__(self) -> Completions:
        self._sub = await self.bus.nc.subscribe(self.bus.subjects.event("completed", "*"), cb=self._on_msg)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    async def _on_msg(self, msg: Msg) -> None:
        try:
            env = decode_envelope(msg.data)
        except Exception:  # noqa: BLE001 - a malformed event is the dead-letter path's business
            return
        if isinstance(env.body, EpisodeCompleted) and env.episode not in self.done:
            self.done[env.episode] = env.body
            self._changed.set()

    async def wait(self, episodes: Iterable[str]) -> dict[str, EpisodeCompleted]:
        """Block until every episode in `episodes` has completed."""
        wanted = set(episodes)
        while not wanted <= self.done.keys():
            self._changed = anyio.Event()
            await self._changed.wait()
        return {e: self.done[e] for e in wanted}

    async def changed(self) -> None:
        self._changed = anyio.Event()
        await self._changed.wait()


