"""Testing a system of one's own, like `temporalio.testing`: the whole system in a pytest test.

`scripted(answer)` is a model that answers with a function of the request. `run_system` runs every agent of a system in this process, against a real nats-server (the
`nats_server` fixture of `faultline.testing.fixtures`), and journals every message to a real
SQLite file; the `SystemRun` it returns reads that journal and replays it. `SystemHarness` runs
one episode with no NATS and no journal, handing messages over in the order they were sent: for
unit tests of an agent's part in the conversation. docs/agents.md shows both.
"""

from collections.abc import Callable

from faultline.core import LlmRequest, LlmResponse, ModelBackend
from faultline.runtime.models import ScriptedBackend
from faultline.testing._harness import HarnessEpisode, SystemHarness
from faultline.testing._run import SystemRun, run_system


def scripted(answer: Callable[[LlmRequest], str | LlmResponse]) -> ModelBackend:
    """A model that answers every request with `answer(request)`: offline, deterministic, recorded like any model."""
    return ScriptedBackend(answer=answer)


__all__ = ["HarnessEpisode", "SystemHarness", "SystemRun", "run_system", "scripted"]
