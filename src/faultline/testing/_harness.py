"""`SystemHarness`: one episode of a system in this process, with no NATS and no journal."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from faultline._errors import BusError, FaultlineError
from faultline.agents import Scorer
from faultline.api import PlannedEpisode, RunPlan, start_envelopes
from faultline.core import (
    Agent,
    Context,
    Envelope,
    EpisodeCompleted,
    ErrorRaised,
    InputRecord,
    ModelBackend,
    ModelCall,
    Recorder,
    Recording,
    System,
    error_completion,
    failure_envelopes,
    load_system,
    record_of,
    system_path,
)

MAX_MESSAGES = 10_000
"""Messages one harness episode may hand over before it stops as a runaway (a cycle, a storm)."""


@dataclass
class HarnessEpisode:
    """What one episode did: its completion (None if it never completed), every message sent, every recorded call."""

    completed: EpisodeCompleted | None
    messages: list[Envelope]
    recordings: list[Recording] = field(default_factory=list)

    def sent_by(self, agent: str) -> list[Envelope]:
        return [m for m in self.messages if m.sender == agent]


class SystemHarness:
    """Hands an episode's messages to the system's agents in the order they were sent, one at a time.

    A direct message goes to its recipient, a topic message to every agent subscribed to the topic;
    each agent has one instance for the episode, as in a worker. Model calls go to `models` (one
    backend, or a function of the role); service requests fail. A handler that raises ends the
    episode as `error`, as the runtime does, and so does a send to an agent the system does not have. What NATS adds (redelivery, faults, defenses, the
    journal) is not here: `run_system` has it.
    """

    def __init__(
        self,
        system: str | type[System],
        models: ModelBackend | Callable[[str], ModelBackend] | None = None,
        *,
        max_messages: int = MAX_MESSAGES,
    ) -> None:
        self.path = system_path(system)
        self.ref = load_system(self.path)
        self.models = models
        self.max_messages = max_messages
        self.model_calls: set[ModelCall] = set()
        agents: list[type[Agent]] = [*self.ref.system.agents, Scorer]
        self._classes = {cls.name: cls for cls in agents}

    def backend_for(self, role: str) -> ModelBackend:
        if self.models is None:
            raise BusError(f"no model backend in this harness (role {role!r}): pass models=")
        return self.models if isinstance(self.models, ModelBackend) else self.models(role)

    async def request(self, service: str, payload: bytes, timeout_s: float) -> bytes:
        raise BusError(f"no services in this harness ({service!r})")

    async def run(self, record: Mapping[str, object] | InputRecord, *, episode: str = "harness") -> HarnessEpisode:
        """Run the episode of one input record (a dict with an optional `id`) until it completes or goes quiet."""
        if not isinstance(record, InputRecord):
            record = record_of(record)
        planned = PlannedEpisode(episode=episode, task=record.id, trial=0, seed=0, record=record)
        _started, *kickoff = start_envelopes(RunPlan(domain="", system=self.path), planned)
        queue = deque(kickoff)
        messages = list(kickoff)
        recordings: list[Recording] = []
        instances: dict[str, Agent] = {}
        while queue:
            if len(messages) > self.max_messages:
                raise FaultlineError(f"episode {episode!r} passed {self.max_messages} messages: a cycle or a storm?")
            message = queue.popleft()
            if isinstance(message.body, EpisodeCompleted):
                return HarnessEpisode(message.body, messages, recordings)
            if isinstance(message.body, ErrorRaised):
                queue.appendleft(error_completion(message))
                messages.append(queue[0])
                continue
            for name in self._recipients(message):
                agent = instances.setdefault(name, self._classes[name]())
                recorder = Recorder(services=self)
                ctx = Context(
                    agent=name, message=message, recorder=recorder, services=self, recipients=self.ref.recipients(name)
                )
                try:
                    await agent.on_message(message, ctx)
                    outputs = ctx.outputs
                except Exception as exc:  # noqa: BLE001 - as in a worker: the handler's failure is its episode's
                    outputs = failure_envelopes(name, message, exc)
                recordings.extend(recorder.made)
                queue.extend(outputs)
                messages.extend(outputs)
        return HarnessEpisode(None, messages, recordings)

    def _recipients(self, message: Envelope) -> list[str]:
        if message.recipient:
            return [message.recipient] if message.recipient in self._classes else []
        if message.topic:
            return [name for name, cls in self._classes.items() if message.topic in cls.topics]
        return []
