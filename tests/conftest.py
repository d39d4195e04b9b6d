"""Fixtures shared by every test folder: a connected bus, a small disk to fill (the real nats-server, `nats_server`,
is the one `faultline.testing.fixtures` gives every user)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, settings

from faultline.bus import Bus, EmbeddedServer
from tests.disk import small_disk as small_disk

# The suite runs on every core of a small machine beside nats-servers and worker processes: how long
# hypothesis takes to draw an example there says nothing about the code, so time is not checked.
settings.register_profile("shared-cores", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("shared-cores")


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
