"""The controller on the bus: completed failures in, cases to the `fama` agent, rosters out.

`FamaService` (the `faultline fama serve` process, started by `faultline up` with `[fama] enabled`)
does the two things the agent cannot do in a handler, because they are not a function of its inputs:

- it reads each failed episode back from the stream when its completed event arrives (a durable
  consumer, one event in flight) and sends the `FailureCase` to agent `fama` in the controller
  episode of its (domain, model), with an id derived from the completed event's, and sends it
  once: a completion delivered again (its acknowledgement lost by a killed nats-server, past the
  duplicate window) whose case the stream holds sends nothing (`_sent_before`);
- it reads the agent's `fama_roster` notices (another durable consumer) and, unless the decision
  is a dry run, publishes the roster on `fl.ctl.helpers` for the tool agent's configured model name,
  again with an id derived from the notice's. It runs with the operator's credential: a roster is privileged.

It builds each case for the analysts `[fama] analysts` names (the trajectory alone by default, as
in the FAMA paper). With `[fama] attribution` on, it also finds the replay-based attribution's
decisive step, which informed analysts are given and trajectory analysts never see: once the
journal service answers that the journal file holds the stream up to the completed event, it
attributes the episode from that file (read only; the forks go to the journal's forks file), and
sends the case without it when the journal does not catch up within `journal_wait_s` or the
attribution fails. The journaled case holds whatever evidence was found, so replay never forks.
Forks run the episode's agents in this process and call their models, which is why it is off by default.

The stages run in a `Worker` of this process that serves the `fama` agent like any worker serves
an agent, so the controller's model calls are journaled and replayed like every other agent's.
The service reads and publishes only; the worker's handler waits on the judge, one controller
episode at a time, so a slow judge delays the controller, never the bus or other episodes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from faultline._errors import ConfigError, FaultlineError, JournalError
from faultline.bus import Bus, Consumer, Login
from faultline.core import RUNNER, Envelope, EpisodeCompleted, Notice, derive_id
from faultline.runtime import (
    FAMA_CONSUMERS,
    Config,
    FamaConfig,
    Worker,
    ask_journal,
    connect,
    make_backend,
    roster_control,
    serve_until_signal,
    serving,
    worker_settings,
)
from faultline.services._resume import resumed_consumer
from faultline.services.fama._case import FAILED_OUTCOMES, FailureCase, failure_case
from faultline.services.fama._controller import CONTROLLER, ROSTER, FamaController, case_message, controller_episode
from faultline.services.fama._offline import attribute_case
from faultline.services.memory import read_episode

log = logging.getLogger(__name__)

CASES_CONSUMER, ROSTERS_CONSUMER = FAMA_CONSUMERS
READ_TIMEOUT_S = 10.0
"""Longest read of one episode back from the stream."""
JOURNAL_WAIT_S = 30.0
"""Longest wait for the journal file to hold a failed episode before it is attributed."""

Attribute = Callable[[FailureCase], Awaitable[FailureCase]]
"""A case with the attribution's decisive step among its evidence, read from the journal file."""


class FamaService:
    """Runs until `stop()`; `cases` and `published` count what it sent.

    `settings` go with every case to the controller. `model` is the model name the system's tool agent
    is configured with, under which rosters are
    published (what `faultline run --nats` looks up; empty: any model). `attribute`, when given,
    adds the attribution to each case once the journal file holds its episode.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        settings: FamaConfig,
        worker: Worker,
        model: str = "",
        read_timeout_s: float = READ_TIMEOUT_S,
        attribute: Attribute | None = None,
        journal_wait_s: float = JOURNAL_WAIT_S,
    ) -> None:
        self.bus = bus
        self.worker = worker
        self.settings = settings
        self.model = model
        self.read_timeout_s = read_timeout_s
        self.attribute = attribute
        self.journal_wait_s = journal_wait_s
        self.cases = 0
        self.published = 0
        self._last_seq: int | None = None
        """The stream sequence of the last failed completion delivered; None until the first."""
        self._sent: set[str] = set()
        """The ids of the cases the stream held after the last read of them, less those of completions since."""
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
            cases = await resumed_consumer(self.bus, CASES_CONSUMER, s.event("completed", "*"))
            rosters = await resumed_consumer(self.bus, ROSTERS_CONSUMER, s.event("notice", "*"))
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

    async def _read(self, consumer: Consumer, handle: Callable[[Envelope, int], Awaitable[None]]) -> None:
        while True:
            for delivery in await consumer.batch():
                env = await self.bus.decode_or_dead_letter(delivery)
                if env is not None:
                    async with consumer.keep_alive(delivery):  # an attribution runs forks: it may take a while
                        await handle(env, delivery.stream_seq)
                await consumer.ack(delivery)

    async def _on_completed(self, completed: Envelope, seq: int) -> None:
        """Send the case of a failed episode to the controller of its (domain, model)."""
        body = completed.body
        if not isinstance(body, EpisodeCompleted) or body.outcome not in FAILED_OUTCOMES:
            return
        if completed.episode.startswith(f"{CONTROLLER}-"):
            return
        case_id = derive_id(completed.id, 0, "fama")
        if await self._sent_before(case_id, seq):
            log.info("fama: the case of episode %s is in the stream already; not sent again", completed.episode)
            return
        envelopes = await read_episode(self.bus, completed.episode, self.read_timeout_s)
        case = failure_case(envelopes, self.settings.analysts)
        if case is None:
            return
        if self.attribute is not None:
            case = await self._attributed(case, seq, self.attribute)
        episode = controller_episode(case.domain, case.model)
        await self.bus.publish(
            Envelope(
                id=case_id,
                episode=episode,
                sender=RUNNER,
                recipient=CONTROLLER,
                body=case_message(case, self.settings),
                causation=completed.id,
                ts=time.time(),
            )
        )
        self.cases += 1

    async def _sent_before(self, case_id: str, seq: int) -> bool:
        """Whether the stream holds case `case_id` of the completion at `seq`.

        A case is published after its completion, so the cases read after `seq` - 1 hold those of every
        completion from `seq` on. They are read at the first failed completion delivered, and again when one
        comes that is not past the last (a restarted nats-server lost acknowledgements, docs/reliability.md):
        deliveries are otherwise in stream order, so between reads a set of ids, each dropped once its
        completion has passed, answers.
        """
        if self._last_seq is None or seq <= self._last_seq:
            subject = self.bus.subjects.direct("*", CONTROLLER, RUNNER)
            stored = await self.bus.read_envelopes([subject], self.read_timeout_s, after=seq - 1)
            self._sent = {env.id for _, env in stored}
        self._last_seq = seq
        if case_id in self._sent:
            self._sent.discard(case_id)
            return True
        return False

    async def _attributed(self, case: FailureCase, seq: int, attribute: Attribute) -> FailureCase:
        """The case with the attribution, once the journal file holds the stream up to `seq`; as it was if not."""
        try:
            stuck = (await ask_journal(self.bus, self.journal_wait_s, until=seq)).stuck
            if stuck:
                raise JournalError(f"the journal service cannot write: {stuck}")
            return await attribute(case)
        except FaultlineError as exc:
            log.warning("fama: episode %s analysed without attribution: %s", case.episode, exc)
            return case

    async def _on_notice(self, env: Envelope, seq: int) -> None:
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


async def serve_fama(
    config: Config, url: str, prefix: str, name: str, login: Login | None = None, journal: Path | None = None
) -> None:
    """The `faultline fama serve` process: serve until SIGTERM/SIGINT, announced ready as `name`.

    `journal` is the file the system's journal service writes (default `[journal] path`), which
    `[fama] attribution` reads. ConfigError with `[fama] rosters = "per_task"`: a live system
    publishes one roster per (domain, model).
    """
    if config.fama.rosters != "shared":
        raise ConfigError(
            f'[fama] rosters = "{config.fama.rosters}" is for `faultline fama loop`: a live system keeps one roster'
            ' per (domain, model); use rosters = "shared" for the controller'
        )
    path = journal or Path(config.journal.path)

    async def attribute(case: FailureCase) -> FailureCase:
        return await attribute_case(path, case, config)

    async with serving(await connect(config, url, prefix=prefix, name=name, login=login)) as bus:
        model = config.model(config.role_of("tool")).model
        worker = Worker(
            bus, [FamaController], lambda role: make_backend(config, role), worker_settings(config), name=name
        )
        service = FamaService(
            bus,
            settings=config.fama,
            worker=worker,
            model=model,
            attribute=attribute if config.fama.attribution != "off" else None,
        )
        await serve_until_signal(bus, name, service)
