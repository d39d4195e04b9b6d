"""Fixtures shared by every test folder: a connected bus, a small disk to fill (the real nats-server, `nats_server`,
is the one `faultline.testing.fixtures` gives every user)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, settings

from faultline.bus import Bus, EmbeddedServer
from tests.disk import run_disk as run_disk
from tests.disk import small_disk as small_disk

# The suite runs on every core of a small machine beside nats-servers and worker processes: how long
# hypothesis takes to draw an example there says nothing about the code, so time is not checked.
settings.register_profile("shared-cores", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("shared-cores")

# The suite starts hundreds of Python processes (workers, journal services, CLIs, pytest's own workers, which
# inherit this process's environment): a shell that exports PYTHONDONTWRITEBYTECODE would have every one of
# them compile faultline and its dependencies from source again, about half the suite's time on two cores.
# The bytecode lands in the __pycache__ folders git ignores, as without that variable.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """Two pytest workers a core for `--numprocesses auto`: most tests wait on nats-servers, worker processes and
    their events far longer than they compute, and on 2 cores four workers took 4.6-4.9 minutes where two took 6.3.
    `PYTEST_XDIST_AUTO_NUM_WORKERS` still decides when it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return 2 * len(os.sched_getaffinity(0))


@pytest.fixture
async def bus(nats_server: EmbeddedServer) -> AsyncIterator[Bus]:
    """A bus connected to `nats_server`, with the journal stream created."""
    connected = await Bus.connect(nats_server.url)
    await connected.ensure_stream()
    try:
        yield connected
    finally:
        await connected.close()


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped output is as wide as the commands make it, whatever `$COLUMNS` the shell that runs the tests exports."""
    monkeypatch.delenv("COLUMNS", raising=False)
