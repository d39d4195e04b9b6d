"""The agent API: a name, the topics it listens to, and one handler."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from faultline.core._messages import Envelope
from faultline.core._plugins import load_plugin, plugin_error
from faultline.core._subjects import check_token

if TYPE_CHECKING:
    from faultline.core._context import Context


class Agent:
    """Subclass, set `name` (and `topics`), implement `on_message`.

    The runtime makes one instance per (episode, agent) and hands it that
    episode's messages one at a time, in stream order. State lives on the
    instance. Everything nondeterministic goes through `ctx` (model calls,
    service requests, time, randomness), so a journal can replay the agent
    exactly; an agent that reads the clock or a global random generator
    directly breaks replay.
    """

    name: ClassVar[str]
    topics: ClassVar[tuple[str, ...]] = ()
    environment: ClassVar[bool] = False
    """True for an agent that stands for the world (it runs tools against a domain's state).

    Its outputs are inputs to every other agent, so replay serves them from the
    journal by default, like model answers, instead of running the world again;
    `faultline replay --reexecute-tools` runs it too, which is how a changed
    environment is found.
    """
    completes: ClassVar[bool] = False
    """True for an agent that may complete its episodes (the environment, which scores them). The
    server refuses a completion from any other agent; a failing handler publishes an `ErrorRaised`
    and the runner completes its episode."""

    service: ClassVar[bool] = False
    """True for an agent that serves the system for its whole life in an episode of its own that
    never completes (the FAMA controller): `faultline status` lists that episode as a service, not
    as an episode in flight.
    """

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            check_token(cls.name, "agent name")
            for topic in cls.topics:
                check_token(topic, "topic")

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        raise NotImplementedError


def load_agent_class(name: str) -> type[Agent]:
    """The agent class a registered name (`tool`) or a `package.module:Class` path stands for."""
    cls = load_plugin("agent", name)
    if not (isinstance(cls, type) and issubclass(cls, Agent) and hasattr(cls, "name")):
        raise plugin_error("agent", name, f"{_describe(cls)} is not a faultline Agent subclass with a name")
    return cls


def _describe(found: object) -> str:
    return f"class {found.__name__}" if isinstance(found, type) else f"a {type(found).__name__}"
