"""Who may speak on which subject: NATS users with per-user publish and subscribe permissions.

Nothing here is an authentication scheme of our own: every identity is a NATS
user with a password and the server's own permission lists, written into a
server configuration that `nats-server` enforces. The permissions follow the
message flow. Direct, topic and event subjects end in the sender's name and
recordings name their agent, so "a worker speaks only as its agents" is a
subject permission; the receiver's `check_delivered` then holds the envelope's
sender to that subject token (defence in depth).

- the operator (control plane, CLI, runner) may publish and subscribe anywhere;
- an agent identity (a worker group) publishes only as its agents (completions
  only as an agent that completes episodes, the environment), on dead letters
  and on services, and subscribes only to services, completions and its own
  inboxes; its stream reads go through the JetStream API, where it may read the
  stream's state and use consumers, never create, change or delete the stream;
- a recorder (the memory service) publishes only its recordings;
- the journal service reads the stream and publishes nothing but its acks,
  its dead letters and its answers.

A folder of credentials is made once and reused: a file per identity
(`<name>.json`, readable by its owner only) and `nats-server.conf` for the server.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from faultline._errors import AccessError
from faultline.core import Subjects

OPERATOR = "operator"
JOURNAL = "journal"
SERVER_CONFIG = "nats-server.conf"
PASSWORD_BYTES = 32


class Credential(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a process presents to NATS: the user it connects as and that user's password."""

    user: str
    password: str


@dataclass(frozen=True, slots=True)
class Login:
    """How a process connects: the NATS user it is (None on an --insecure system) and the CA
    it checks the server's certificate against (None without TLS)."""

    credential: Credential | None = None
    tls_ca: Path | None = None


@dataclass(frozen=True, slots=True)
class Identity:
    """A NATS user and the subjects it may publish and subscribe to."""

    name: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    refused: tuple[str, ...] = ()
    """Subjects inside `publish` that it may not publish on all the same."""

    @property
    def operator(self) -> bool:
        return self.publish == (">",)


def operator_identity() -> Identity:
    """The control plane: publishing on `<prefix>.ctl.>` (faults, rosters) is the operator's alone."""
    return Identity(OPERATOR, (">",), (">",))


def _reader(subjects: Subjects) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What every process that reads the stream needs: stream state, consumers, acks, dead letters, services."""
    p, stream = subjects.prefix, subjects.stream
    publish = (
        "$JS.API.INFO",
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.CONSUMER.*.{stream}",
        f"$JS.API.CONSUMER.*.{stream}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.>",
        f"$JS.ACK.{stream}.>",
        subjects.dlq,
        f"{p}.svc.>",
    )
    return publish, ("_INBOX.>", f"{p}.svc.>")


def agent_identity(subjects: Subjects, name: str, agents: Iterable[str], completers: Collection[str] = ()) -> Identity:
    """A process that speaks as `agents` (a worker group, the memory service): it publishes only as them.

    Of its agents only `completers` (the environment) may complete an episode.
    """
    agents = tuple(agents)
    publish, subscribe = _reader(subjects)
    own = tuple(
        subject
        for agent in agents
        for subject in (
            subjects.direct("*", "*", agent),
            subjects.topic("*", "*", agent),
            subjects.rec("*", agent),
            subjects.event("*", "*", agent),
        )
    )
    refused = tuple(subjects.event("completed", "*", agent) for agent in agents if agent not in completers)
    return Identity(name, (*own, *publish), (*subscribe, subjects.event("completed", "*")), refused)


def recorder_identity(subjects: Subjects, name: str, agent: str) -> Identity:
    """A service that only records calls as `agent` (the memory service's reflections) and answers requests."""
    publish, subscribe = _reader(subjects)
    return Identity(name, (subjects.rec("*", agent), *publish), subscribe)


def journal_identity(subjects: Subjects) -> Identity:
    """The journal service reads everything through its consumer and speaks as nobody."""
    publish, subscribe = _reader(subjects)
    return Identity(JOURNAL, publish, subscribe)


def load_credential(path: Path) -> Credential:
    """The credential in `path`; AccessError, in one line, when the file is missing or is not one."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=Credential)
    except FileNotFoundError:
        raise AccessError(
            f"credential file {path} does not exist: pass the file `faultline up` wrote for this process"
        ) from None
    except OSError as exc:
        raise AccessError(f"credential file {path} cannot be read: {exc.strerror or exc}") from None
    except msgspec.DecodeError as exc:
        raise AccessError(f"credential file {path} is not a credential: {exc}") from None


def _write_private(path: Path, data: bytes) -> None:
    """Write `path` readable and writable by its owner only, from the first byte on."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT


@dataclass(frozen=True, slots=True)
class Access:
    """A folder of credentials for `identities`, and the server configuration that enforces their permissions."""

    folder: Path
    identities: Sequence[Identity]

    def credential_file(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def credential(self, name: str) -> Credential:
        return load_credential(self.credential_file(name))

    @property
    def server_config(self) -> Path:
        return self.folder / SERVER_CONFIG

    def prepare(self) -> Access:
        """Create each missing credential (kept ones are reused), then write the server configuration.

        The permissions are written afresh every time, so a changed worker layout
        takes effect at the next start without new passwords.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        users = []
        for identity in self.identities:
            path = self.credential_file(identity.name)
            if not path.exists():
                fresh = Credential(user=identity.name, password=secrets.token_urlsafe(PASSWORD_BYTES))
                _write_private(path, msgspec.json.encode(fresh))
            credential = self.credential(identity.name)
            users.append(_user(credential, identity))
        # JSON is nats-server's format too: encoding it leaves no quoting to chance. No braces around
        # the whole, so that a node's own configuration can `include` the file.
        _write_private(self.server_config, b"authorization: " + msgspec.json.encode({"users": users}) + b"\n")
        return self


def _user(credential: Credential, identity: Identity) -> dict[str, object]:
    publish: dict[str, list[str]] = {"allow": list(identity.publish)}
    if identity.refused:
        publish["deny"] = list(identity.refused)  # deny wins over allow in nats-server
    permissions: dict[str, object] = {
        "publish": publish,
        "subscribe": {"allow": list(identity.subscribe)},
    }
    if not identity.operator:
        permissions["allow_responses"] = True  # answer a request once, on the inbox it came with
    return {"user": credential.user, "password": credential.password, "permissions": permissions}
