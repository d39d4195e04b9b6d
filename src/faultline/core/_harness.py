"""Driving one agent in-process, without NATS: the way to unit-test an agent."""

from __future__ import annotations

from faultline._errors import BusError
from faultline.core._agent import Agent
from faultline.core._context import Context, Recorder
from faultline.core._messages import Body, Envelope, Recording, derive_id
from faultline.core._models import ModelBackend, ModelCall
from faultline.core._system import System, load_system, system_path


class AgentHarness:
    """Hands messages to one agent instance and returns what it emitted.

    Model calls go to `backend`; service requests fail (there is no bus). The
    calls the agent made are kept in `recordings`, as the journal would keep them.
    Told its `system` (a class or `package.module:Class`), the agent may send only
    to whom a worker of that system lets it (`SystemRef.recipients`): a typo raises
    `UnknownRecipientError` from `deliver`, as it fails the episode live.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        episode: str = "harness",
        backend: ModelBackend | None = None,
        system: str | type[System] | None = None,
    ) -> None:
        self.agent = agent
        self.episode = episode
        self.backend = backend
        self.recordings: list[Recording] = []
        self.model_calls: set[ModelCall] = set()
        self.recipients = None if system is None else load_system(system_path(system)).recipients(agent.name)
        """Whom the agent may send to; None (anyone) without a system, as a worker that runs none."""
        self._count = 0

    def backend_for(self, role: str) -> ModelBackend:
        if self.backend is None:
            raise BusError(f"no model backend in this harness (role {role!r})")
        return self.backend

    async def request(self, service: str, payload: bytes, timeout_s: float) -> bytes:
        raise BusError(f"no services in this harness ({service!r})")

    async def deliver(self, body: Body, *, sender: str = "runner", topic: str = "") -> list[Envelope]:
        """Hand `body` to the agent as a message from `sender`; return its outputs."""
        self._count += 1
        message = Envelope(
            id=derive_id(self.episode, self._count, "h"),
            episode=self.episode,
            sender=sender,
            recipient="" if topic else self.agent.name,
            topic=topic,
            body=body,  # type: ignore[arg-type]
        )
        recorder = Recorder(services=self)
        ctx = Context(
            agent=self.agent.name, message=message, recorder=recorder, services=self, recipients=self.recipients
        )
        await self.agent.on_message(message, ctx)
        self.recordings.extend(recorder.made)
        return ctx.outputs
