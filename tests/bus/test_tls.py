"""TLS: certificates made once, a server that speaks only TLS, clients that verify it."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultline._errors import AccessError
from faultline.bus import Bus, BusSettings, EmbeddedServer, Login, TLSFiles, make_certificates

QUICK = BusSettings(connect_timeout_s=1.0)


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[EmbeddedServer, TLSFiles]]:
    tls = make_certificates(tmp_path / "tls")
    with EmbeddedServer(store_dir=tmp_path / "nats", tls=tls) as server:
        yield server, tls


def test_certificates_are_made_once_with_private_keys(tmp_path: Path) -> None:
    first = make_certificates(tmp_path / "tls")
    made = {path: path.read_bytes() for path in (first.ca, first.cert, first.key)}
    again = make_certificates(tmp_path / "tls")
    assert again == first and {path: path.read_bytes() for path in made} == made
    for key in (first.key, tmp_path / "tls" / "ca-key.pem"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    assert b"BEGIN CERTIFICATE" in made[first.cert]


async def test_a_client_that_trusts_the_ca_speaks_tls(tls_server: tuple[EmbeddedServer, TLSFiles]) -> None:
    """The server takes nothing but TLS (the next test), so a client that publishes through it spoke TLS."""
    server, tls = tls_server
    bus = await Bus.connect(server.url, login=Login(tls_ca=tls.ca))
    try:
        await bus.ensure_stream()
        assert await bus.publish_raw(bus.subjects.dlq, b"over tls") == 1
    finally:
        await bus.close()


@pytest.mark.parametrize("trust", ["no CA", "another CA"])
async def test_a_client_that_cannot_verify_the_server_stops_with_one_line(
    tls_server: tuple[EmbeddedServer, TLSFiles], tmp_path: Path, trust: str
) -> None:
    server, _ = tls_server
    ca = make_certificates(tmp_path / "other").ca if trust == "another CA" else None
    with pytest.raises(AccessError) as refused:
        await Bus.connect(server.url, settings=QUICK, login=Login(tls_ca=ca))
    said = str(refused.value)
    assert "\n" not in said
    if ca is None:
        assert said.endswith("this machine does not trust (unable to get local issuer certificate): pass --tls-ca FILE")
    else:
        assert f"failed the TLS check against {ca}" in said
