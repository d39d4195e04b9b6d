"""A helper worker that follows the live roster: it serves the helpers a roster names, and no others.

`faultline up` runs one worker process for the helpers (`faultline worker --follow-roster`),
a `HelperPool` around a `Worker` that starts with no agent.
It reads `fl.ctl.helpers` from the start of the stream and follows it, and
watches episodes start and complete: it serves every helper that a roster names
or that an episode still running took when it started (a helper dropped from
the roster keeps serving the episodes that have it, and stops once the last of
them completed). Serving or retiring a helper opens or closes its consumer in
this process, which takes milliseconds. After each change the pool tells, on
`fl.svc.helpers.<its user>.taken`, the last control it took in and the helpers it
serves; `fl.svc.helpers` answers the same on request. Only the `helpers` group's
credential may do either (`worker_services`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import msgspec

from faultline._errors import DecodeError
from faultline.bus import Bus, Consumer, Delivery, Message, tell
from faultline.core import Agent, Control, EpisodeCompleted, EpisodeStarted, helper_agent
from faultline.runtime._roster import HELPERS_CONTROL, READ_TIMEOUT_S, TAKEN, PoolState, Rosters
from faultline.runtime._worker import Worker

log = logging.getLogger(__name__)


@dataclass
class HelperPool:
    """Serves on `worker` the helpers the roster and the running episodes ask for; see the module docstring."""

    worker: Worker
    resolve: Callable[[str], type[Agent]]
    """The agent class of a helper agent name."""
    rosters: Rosters = field(default_factory=Rosters)
    running: dict[str, set[str]] = field(default_factory=dict)
    """Episodes in flight, each with the helper agents of its roster."""
    control: str = ""
    _changed: anyio.Event = field(default_factory=anyio.Event)
    _reconciled: anyio.Event = field(default_factory=anyio.Event)

    def wanted(self) -> set[str]:
        """The helper agents to serve: every one a roster names or a running episode has."""
        wanted = {helper_agent(entry) for entry in self.rosters.entries()}
        for agents in self.running.values():
            wanted |= agents
        return wanted

    def state(self) -> PoolState:
        return PoolState(control=self.control, served=sorted(self.worker.serving()))

    async def run(self) -> None:
        """Run the worker, and follow the roster beside it until the worker stops."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._follow, self.worker.bus)
            await self.worker.run()
            tg.cancel_scope.cancel()

    async def wait_ready(self) -> None:
        """Ready once the helpers of the roster in force are served."""
        await self._reconciled.wait()

    def stop(self) -> None:
        self.worker.stop()

    async def _follow(self, bus: Bus) -> None:
        """Follow the roster and the episodes, serving and retiring helpers after each change."""
        s = bus.subjects
        await self.worker.wait_ready()
        controls = await bus.consumer(None, [s.ctl(HELPERS_CONTROL)], start="all")
        shard = (self.worker.settings.shard, self.worker.settings.shards)
        started = await bus.consumer(None, s.shard_events("started", *shard), start="new")
        completed = await bus.consumer(None, s.shard_events("completed", *shard), start="new")
        answers = await bus.subscribe(s.svc(HELPERS_CONTROL), self._on_ask)
        try:
            for delivery in await controls.backlog(READ_TIMEOUT_S):
                self._take(delivery)
            self._changed.set()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read, controls)
                tg.start_soon(self._read, started)
                tg.start_soon(self._read, completed)
                while True:
                    await self._changed.wait()
                    self._changed = anyio.Event()
                    await self._reconcile(bus)
                    self._reconciled.set()
        finally:
            with anyio.CancelScope(shield=True):
                await answers.unsubscribe()
                for consumer in (controls, started, completed):
                    await consumer.close()

    async def _read(self, consumer: Consumer) -> None:
        while True:
            for delivery in await consumer.batch():
                self._take(delivery)

    def _take(self, delivery: Delivery) -> None:
        try:
            env = delivery.envelope()
        except DecodeError:
            return  # dead-lettered when it was published
        body = env.body
        if isinstance(body, Control) and body.name == HELPERS_CONTROL:
            self.rosters.take(body)
            self.control = env.id
        elif isinstance(body, EpisodeStarted) and body.roster:
            self.running[env.episode] = {helper_agent(entry) for entry in body.roster}
        elif isinstance(body, EpisodeCompleted) and env.episode in self.running:
            del self.running[env.episode]
        else:
            return
        self._changed.set()

    async def _on_ask(self, msg: Message) -> None:
        await msg.respond(msgspec.json.encode(self.state()))

    async def _reconcile(self, bus: Bus) -> None:
        wanted, serving = self.wanted(), self.worker.serving()
        for agent in sorted(serving - wanted):
            await self.worker.retire(agent)
            log.info("helper %s retired: no roster and no running episode has it", agent)
        for agent in sorted(wanted - serving):
            await self.worker.serve(self.resolve(agent))
            log.info("helper %s served", agent)
        await tell(bus, HELPERS_CONTROL, TAKEN, msgspec.json.encode(self.state()))
