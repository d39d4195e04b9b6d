"""The agent API: a name, the topics it listens to, and one handler."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, ClassVar

from faultline._errors import ConfigError
from faultline.core._messages import Envelope
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


def load_agent_class(spec: str) -> type[Agent]:
    """An agent class from `package.module:Class`, with a one-line error when it is wrong."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"agent class {spec!r} must look like 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the module raises on import, the answer is one line
        raise ConfigError(
            f"agent class {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})"
        ) from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Agent) and hasattr(cls, "name")):
        raise ConfigError(f"agent class {spec!r} is not a faultline Agent subclass with a name")
    return cls
