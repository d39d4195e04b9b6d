"""The controller on the bus: completed failures in, cases to the `fama` agent, rosters out.

`FamaService` (the `faultline fama serve` process, started by `faultline up` with `[fama] enabled`)
does the two things the agent cannot do in a handler, because they are not a function of its inputs:

- it reads each failed episode back from the stream when its completed event arrives (a durable
  consumer, one event in flight) and sends the `FailureCase` to agent `fama` in the controller
  episode of its (domain, model), with an id derived from the completed event's, so a redelivered
  event sends nothing new;
- it reads the agent's `fama_roster` notices (another durable consumer) and, unless the decision
  is a dry run, publishes the roster on `fl.ctl.helpers` for the tool agent's configured model name,
  again with an id derived from the notice's. It runs with the operator's credential: a roster is privileged.

The stages run in a `Worker` of this process that serves the `fama` agent like any worker serves
an agent, so the controller's model calls are journaled and replayed like every other agent's.
The service reads and publishes only; the worker's handler waits on the judge, one controller
episode at a time, so a slow judge delays the controller, never the bus or other episodes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal

import anyio

from faultline.agents.fama._case import FAILED_OUTCOMES, failure_case
from faultline.agents.fama._controller import CONTROLLER, ROSTER, FamaController, case_message, controller_episode
from faultline.agents.memory import read_episode
from faultline.bus import Bus, Consumer, Login
from faultline.core import RUNNER, Envelope, EpisodeCompleted, Notice, derive_id
from faultline.runtime import (
    Config,
    FamaConfig,
    Worker,
    bus_settings,
    make_backend,
    roster_control,
    serve_until_signal,
    worker_settings,
)

log = logging.getLogger(__name__)

CASES_CONSUMER = "fama-cases"
ROSTERS_CONSUMER = "fama-rosters"
READ_TIMEOUT_S = 10.0
"""Longest read of one episode back from the stream."""


class FamaService:
    """Runs until `stop()`; `cases` and `published` count what it sent.

    `settings` go with every case to the controller. `model` is the model name the system's tool agent
    is configured with, under which rosters are
    published (what `faultline run --nats` looks up; empty: any model).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        settings: FamaConfig,
        worker: Worker,
        model: str = "",
        read_timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        self.bus = bus
        self.worker = worker
        self.settings = settings
        self.model = model
        self.read_timeout_s = read_timeout_s
        self.cases = 0
        self.published = 0
        self._ready = anyio.Event()
        self._stopping = anyio.Event()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    def stop(self) -> None:
        self._stopping.set()
        self.worker.stop()

    async def run(self) -> None:
        """The worker first (a case sent before its consumer exists would wait for a restart), then the readers."""
        s = self.bus.subjects
        async with anyio.create_task_group() as outer:
            outer.start_soon(self.worker.run)
            await self.worker.wait_ready()
            cases = await self._consumer(CASES_CONSUMER, s.event("completed", "*"))
            rosters = await self._consumer(ROSTERS_CONSUMER, s.event("notice", "*"))
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._read, cases, self._on_completed)
                    tg.start_soon(self._read, rosters, self._on_notice)
                    self._ready.set()
                    await self._stopping.wait()
                    tg.cancel_scope.cancel()
            finally:
                await cases.close()
                await rosters.close()

    async def _consumer(self, name: str, subject: str) -> Consumer:
        floor = await self.bus.ack_floor(name)
        start: int | Literal["all"] = "all" if floor is None else floor + 1
        return await self.bus.consumer(name, [subject], start=start, max_ack_pending=1, replace=True)

    async def _read(self, consumer: Consumer, handle: Callable[[Envelope], Awaitable[None]]) -> None:
        while True:
            for delivery in await consumer.batch():
                env = await self.bus.decode_or_dead_letter(delivery)
                if env is not None:
                    await handle(env)
                await consumer.ack(delivery)

    async def _on_completed(self, completed: Envelope) -> None:
        """Send the case of a failed episode to the controller of its (domain, model)."""
        body = completed.body
        if not isinstance(body, EpisodeCompleted) or body.outcome not in FAILED_OUTCOMES:
            return
        if completed.episode.startswith(f"{CONTROLLER}-"):
            return
        case = failure_case(await read_episode(self.bus, completed.episode, self.read_timeout_s))
        if case is None:
            return
        episode = controller_episode(case.domain, case.model)
        await self.bus.publish(
            Envelope(
                id=derive_id(completed.id, 0, "fama"),
                episode=episode,
                sender=RUNNER,
                recipient=CONTROLLER,
                body=case_message(case, self.settings),
                causation=completed.id,
                ts=time.time(),
            )
        )
        self.cases += 1

    async def _on_notice(self, env: Envelope) -> None:
        """Publish a roster the controller chose, unless it chose it in a dry run."""
        body = env.body
        if env.sender != CONTROLLER or not isinstance(body, Notice) or body.text != ROSTER:
            return
        if body.data.get("dry_run"):
            log.info("fama: dry run, roster %s for %s not published", body.data.get("roster"), env.episode)
            return
        control = roster_control(
            "set",
            domain=str(body.data["domain"]),
            model=self.model,
            helpers=list(body.data["roster"]),
            nonce=env.id,
            counts=dict(body.data["counts"]) | {"failures": body.data["failures"]},
        )
        await self.bus.publish(control)
        self.published += 1


async def serve_fama(config: Config, url: str, prefix: str, name: str, login: Login | None = None) -> None:
    """The `faultline fama serve` process: serve until SIGTERM/SIGINT, announced ready as `name`."""
    bus = await Bus.connect(url, prefix=prefix, settings=bus_settings(config), name=name, login=login)
    try:
        await bus.ensure_stream()
        model = config.model(config.role_of("tool")).model
        worker = Worker(
            bus, [FamaController], lambda role: make_backend(config, role), worker_settings(config), name=name
        )
        service = FamaService(bus, settings=config.fama, worker=worker, model=model)
        await serve_until_signal(bus, name, service)
    finally:
        await bus.close()
