"""Fixtures shared by every test folder: a real nats-server, a connected bus, a small disk to fill."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from faultline.bus import Bus, EmbeddedServer
from tests.disk import small_disk as small_disk

# The suite runs on every core of a small machine beside nats-servers and worker processes: how long
# hypothesis takes to draw an example there says nothing about the code, so time is not checked.
settings.register_profile("shared-cores", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("shared-cores")


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A real nats-server with JetStream on a free loopback port, stopped afterwards."""
    with EmbeddedServer(store_dir=tmp_path / "nats") as server:
        yield server


@pytest.fixture
async def bus(nats_server: EmbeddedServer) -> AsyncIterator[Bus]:
    """A bus connected to `nats_server`, with the journal stream created."""
    connected = await Bus.connect(nats_server.url)
    await connected.ensure_stream()
    try:
        yield connected
    finally:
        await connected.close()
