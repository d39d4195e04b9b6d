"""Connecting to NATS: the servers of a cluster, TLS and login, and an error that says why not.

The first connect fails fast; once connected, the client rides out server restarts.
"""

from __future__ import annotations

import hashlib
from typing import Any

import anyio
import nats.errors
from nats.aio.client import Client as NatsClient

from faultline._errors import AccessError, BusError
from faultline.bus._access import Credential, Login, inbox
from faultline.bus._client import Client
from faultline.bus._refusals import Refusals, failed_tls, refused_login
from faultline.bus._settings import BusSettings
from faultline.bus._tls import client_context

MAX_OUTSTANDING_PINGS = 2


async def open_client(
    url: str, settings: BusSettings, *, name: str, login: Login | None
) -> tuple[NatsClient, Refusals]:
    """A client connected to `url` (see `Bus.connect`), and what its server refuses it from now on.

    AccessError when the server refuses the login or the TLS handshake fails, BusError when it cannot be reached.
    """
    credential, tls_ca = (login.credential, login.tls_ca) if login else (None, None)
    refusals = Refusals(f"{name} (user {credential.user!r})" if credential else name)
    servers = [part.strip() for part in url.split(",") if part.strip()]
    # Seconds, which nats-py takes as any number though it annotates them as whole ones.
    options: dict[str, Any] = {
        "connect_timeout": settings.connect_timeout_s,
        "reconnect_time_wait": 0.2,
        "ping_interval": settings.ping_interval_s,
    }
    if credential:
        options |= {"user": credential.user, "password": credential.password, "inbox_prefix": inbox(credential.user)}
    if tls_ca is not None:
        options["tls"] = client_context(tls_ca)
    try:
        # The client can keep retrying a TLS handshake it will never pass: bound the whole attempt.
        with anyio.fail_after(settings.connect_timeout_s * (len(servers) + 1)):
            nc = Client()
            await nc.connect(
                servers,
                name=name,
                max_reconnect_attempts=1,
                allow_reconnect=True,
                error_cb=refusals.on_error,
                reconnected_cb=refusals.on_reconnect,
                max_outstanding_pings=MAX_OUTSTANDING_PINGS,
                **options,
            )
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        if refusals.login_refused or isinstance(exc, nats.errors.AuthorizationError):
            raise AccessError(refused_login(url, credential)) from None
        if refusals.tls_failure:
            raise AccessError(failed_tls(url, tls_ca, refusals.tls_failure)) from None
        raise BusError(f"cannot reach NATS at {url}: {exc or type(exc).__name__}") from None
    refusals.connected = True
    # Fail fast on the first connect, but once connected ride out server restarts.
    nc.options["max_reconnect_attempts"] = settings.max_reconnect_attempts
    return nc, refusals


def id_key(credential: Credential | None) -> bytes:
    """`Bus.id_key` for a connection with `credential`: none without one, where anyone may publish anything."""
    if credential is None:
        return b""
    return hashlib.blake2b(credential.password.encode(), digest_size=32, person=b"faultline-ids").digest()
