"""What the NATS server refused this connection: its login, its TLS handshake, its publishes, its subscriptions and its
requests to the JetStream API, which the client library hands on only as asynchronous errors."""

from __future__ import annotations

import contextlib
import logging
import re
import ssl
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

import anyio
import nats.errors

from faultline._errors import BusError, PublishRefusedError, SubscribeRefusedError
from faultline.bus._access import Credential
from faultline.bus._acks import Round
from faultline.bus._messaging import nats_failure

_REFUSED_PUBLISH = re.compile(r"permissions violation for publish to \"?([^\"' ]+)", re.IGNORECASE)
_REFUSED_SUBSCRIPTION = re.compile(r"permissions violation for subscription to \"?([^\"' ]+)", re.IGNORECASE)

log = logging.getLogger(__name__)

_API_PREFIX = "$js.api."
"""The JetStream API's subjects, in lower case as the client library hands the server's refusals on."""


_CONNECTION_LOST = (
    OSError,
    nats.errors.ConnectionClosedError,
    nats.errors.StaleConnectionError,
    nats.errors.NoServersError,
    nats.errors.TimeoutError,
)
"""The client's errors while it has no server, or is getting it back."""


class Refusals:
    """Publishes the server refused on this connection: logged as they come, and told to the publishers waiting."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.subjects: deque[str] = deque(maxlen=256)
        """Lower case, as the client library hands the server's errors on."""
        self.subscriptions: deque[str] = deque(maxlen=64)
        """The subjects whose subscriptions the server refused, lower case."""
        self.login_refused = False
        self.api_refused = 0
        """How many requests to the JetStream API the server refused (`asking_jetstream`)."""
        self.api_subjects: deque[str] = deque(maxlen=256)
        """The subjects of the latest of them, lower case."""
        self.tls_failure = ""
        self.connected = False
        """Whether the first connect succeeded: until then, what fails is raised by the connect itself."""
        self.reconnected = anyio.Event()
        """Set at the next reconnect (then replaced): what was sent on core NATS meanwhile never came."""
        self.rounds: set[Round] = set()
        """Rounds of publishes waiting for their answers: each is woken at a refusal, to see if it is one of its own."""

    async def on_error(self, exc: Exception) -> None:
        """NATS's asynchronous errors: a refused login or publish, known here; any other is logged, and connection
        hiccups surface where they hurt too."""
        if isinstance(exc, nats.errors.AuthorizationError) or "authorization violation" in str(exc).lower():
            self.login_refused = True
            return
        if isinstance(exc, ssl.SSLError):
            self.tls_failure = getattr(exc, "verify_message", "") or getattr(exc, "reason", "") or str(exc)
            return
        if refused := _REFUSED_SUBSCRIPTION.search(str(exc)):
            self.subscriptions.append(refused.group(1))  # and logged below: a subscriber may not ask
        found = _REFUSED_PUBLISH.search(str(exc))
        if found is None:
            # Losing the server is said where it hurts (a publish unconfirmed, a read that fails) and is retried
            # every reconnect_time_wait: a warning per attempt would flood the log while a server restarts.
            level = logging.WARNING if self.connected and not isinstance(exc, _CONNECTION_LOST) else logging.DEBUG
            log.log(level, "NATS error on %s's connection: %s", self.name, exc or type(exc).__name__)
            return
        subject = found.group(1)
        # A waiting publisher, or the asker of the JetStream API, raises it (PublishRefusedError): said once, by
        # whoever handles that.
        asked = subject.startswith(_API_PREFIX)
        self.api_refused += asked
        if asked:
            self.api_subjects.append(subject)
        said = bool(self.rounds) or asked
        log.log(
            logging.DEBUG if said else logging.ERROR, "NATS refused %s permission to publish on %s", self.name, subject
        )
        self.subjects.append(subject)
        for round_ in self.rounds:
            round_.wake()

    @contextlib.contextmanager
    def asking_jetstream(self, what: str, consumer: str = "") -> Iterator[None]:
        """`nats_failure` for requests to the JetStream API: one the server refused this credential is named so
        (PublishRefusedError), where its asker would see only a timeout. A request about one `consumer` is
        refused only by a refusal that names it (`check_asked`)."""
        refused = self.api_refused
        try:
            with nats_failure(what):
                yield
        except PublishRefusedError:
            raise  # said already, and better, by whoever knew more
        except BusError:
            self.check_asked(refused, what, consumer)
            raise

    def check_asked(self, refused_before: int, what: str, consumer: str = "") -> None:
        """PublishRefusedError if the server refused a JetStream API request since it had refused `refused_before`
        (`api_refused`): `what` was such a request, and one about `consumer` where a refused subject names it.

        A refusal says its subject, not which request it answers. Other requests fail at the same time while a
        cluster chooses its leaders (timeouts, asked again), and some of this connection's are refused then: the
        client library asks a server it is still reconnecting to for a consumer without its name, which only the
        operator may. Taking any refusal for this request's made a worker stop for good on a passing fault.
        """
        count = self.api_refused - refused_before
        if count <= 0:
            return
        token = consumer.lower()
        if token and not any(token in subject.split(".") for subject in list(self.api_subjects)[-count:]):
            return
        raise PublishRefusedError(
            f"NATS refused {self.name} {what}: the credential it connected with may not (the operator's may)"
        )

    def check_consumer(self, stream: str, name: str, filter_subjects: Sequence[str]) -> None:
        """PublishRefusedError if the server refused the request that opens consumer `name` on `stream`: a
        credential that may not read `filter_subjects` is refused every time, so asking again cannot help."""
        create = f"create.{stream}.{name}".lower()
        for subject in self.subjects:
            if create in subject:
                raise PublishRefusedError(
                    f"NATS refused {self.name} a consumer of {', '.join(filter_subjects)} on stream {stream}: the"
                    " credential it connected with may not read there"
                )

    def check_subscribed(self, subject: str) -> None:
        """SubscribeRefusedError if the server refused the subscription to `subject`."""
        if subject.lower() in self.subscriptions:
            raise SubscribeRefusedError(
                f"NATS refused {self.name} permission to hear {subject}: the credential it connected with may not"
                " (the operator's may)"
            )

    async def on_reconnect(self) -> None:
        self.reconnected.set()
        self.reconnected = anyio.Event()

    def check(self, subjects: set[str]) -> None:
        """PublishRefusedError if the server refused a publish on one of `subjects`.

        Asked at every round of publishes: with nothing refused, as is usual, it compares nothing."""
        if not self.subjects:
            return
        refused = set(self.subjects)
        for subject in subjects:
            if subject.lower() in refused:
                raise PublishRefusedError(
                    f"NATS refused {self.name} permission to publish on {subject}: the credential it connected with"
                    " may not publish there (only the operator publishes controls; a worker speaks only as its agents)"
                )


def failed_tls(url: str, tls_ca: Path | None, reason: str) -> str:
    if tls_ca is None:
        return f"NATS at {url} speaks TLS with a certificate this machine does not trust ({reason}): pass --tls-ca FILE"
    return f"NATS at {url} failed the TLS check against {tls_ca} ({reason}): is it the CA that signed its certificate?"


def refused_login(url: str, credential: Credential | None) -> str:
    if credential is None:
        return (
            f"NATS at {url} wants a credential: pass --creds FILE (written by `faultline up`), or start it --insecure"
        )
    return f"NATS at {url} refused the credential of user {credential.user!r}: wrong user or password"
