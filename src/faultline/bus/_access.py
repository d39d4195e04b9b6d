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
  inbox (`inbox`), where its consumers deliver and its requests are answered;
- a recorder (the memory service) publishes only its recordings;
- the journal service reads the stream and publishes nothing but its acks,
  its dead letters and its answers.

Reads of the stream are held to each identity's own too, with the JetStream API's
subjects. The operator makes each worker's durable consumers (`ConsumerSpec`),
delivering into that worker's inbox; the worker may only ask for their state,
reset them to their acknowledgement floor and acknowledge their deliveries. Any
other read is a short-lived consumer made with the filtered form of the create
subject (`$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`, which the server
holds the consumer's filter to), on filters the identity's permissions name:
its agents' inputs, recordings and timers, completions, starts and fault rules.
Such a consumer acknowledges nothing and is removed by the server once unused,
so no identity but the operator and the journal's own acknowledges, changes or
deletes a consumer it did not make.

A folder of credentials is made once and reused: a file per identity
(`<name>.json`, readable by its owner only) and `nats-server.conf` for the server.
The credential of a user the previous `nats-server.conf` let in and the new one
does not (a worker shard of a count since lowered) is removed with it.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from faultline._errors import AccessError
from faultline.core import OPERATOR, Subjects

INBOX = "_INBOX"
"""The inboxes of a connection without a credential; a user's are under `inbox(user)`."""
JOURNAL = "journal"
SERVER_CONFIG = "nats-server.conf"
PASSWORD_BYTES = 32
_AUTHORIZATION = b"authorization: "
"""How the server configuration begins (`Access.prepare`)."""


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


def inbox(user: str) -> str:
    """The inbox prefix of NATS user `user`: only it may subscribe below, so its consumers' deliveries and the
    answers to its requests are its own."""
    return f"{INBOX}.{user}"


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A durable push consumer the operator makes for `owner`, delivering into the owner's inbox."""

    name: str
    filters: tuple[str, ...]
    owner: str
    ack_wait_s: float

    @property
    def deliver_subject(self) -> str:
        return f"{inbox(self.owner)}.{self.name}"


def operator_identity() -> Identity:
    """The control plane: publishing on `<prefix>.ctl.>` (faults, rosters) is the operator's alone."""
    return Identity(OPERATOR, (">",), (">",))


def _js_api(subjects: Subjects, user: str, serves: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What every identity but the operator may do: learn the stream's state, send dead letters, ask any service
    and receive in its own inbox; and answer the services it `serves`, and tell what it did for them under its own
    name (`Subjects.tell`). Nobody else may answer a service's questions or tell in another's name: a worker could
    otherwise answer for the journal that it cannot write, and every run would stop, or say that another worker
    took a fault rule in."""
    serves = tuple(serves)
    publish = (
        "$JS.API.INFO",
        f"$JS.API.STREAM.INFO.{subjects.stream}",
        subjects.dlq,
        subjects.svc("*"),
        *(subjects.tell(service, user, ">") for service in serves),
    )
    return publish, (f"{inbox(user)}.>", *(subjects.svc(service) for service in serves))


def _reads(subjects: Subjects, filters: Iterable[str]) -> tuple[str, ...]:
    """Making short-lived consumers on `filters` (wildcards stand for any token), and no others."""
    return tuple(f"$JS.API.CONSUMER.CREATE.{subjects.stream}.*.{f}" for f in filters)


def _uses(subjects: Subjects, consumers: Iterable[str]) -> tuple[str, ...]:
    """Reading durable consumers the operator made: their state, a reset to the acknowledgement floor, acks."""
    stream = subjects.stream
    return tuple(
        subject
        for name in consumers
        for subject in (
            f"$JS.API.CONSUMER.INFO.{stream}.{name}",
            f"$JS.API.CONSUMER.RESET.{stream}.{name}",
            f"$JS.ACK.{stream}.{name}.>",
        )
    )


def _guards(subjects: Subjects, durables: Iterable[str]) -> tuple[str, ...]:
    """Refusals of the filtered create subject for the system's durable consumers: that subject also changes an
    existing consumer, and would let a reader point another's consumer at its own filter and inbox."""
    return tuple(f"$JS.API.CONSUMER.CREATE.{subjects.stream}.{name}.>" for name in durables)


def _owns(subjects: Subjects, name: str, filter_subject: str = "") -> tuple[str, ...]:
    """Making, reading and deleting the one durable consumer `name` (on `filter_subject`, or the whole stream)."""
    stream = subjects.stream
    create = f"$JS.API.CONSUMER.CREATE.{stream}.{name}" + (f".{filter_subject}" if filter_subject else "")
    return (create, f"$JS.API.CONSUMER.INFO.{stream}.{name}", f"$JS.API.CONSUMER.DELETE.{stream}.{name}") + (
        f"$JS.ACK.{stream}.{name}.>",
    )


def agent_reads(subjects: Subjects, agent: str, topics: Iterable[str] = ()) -> tuple[str, ...]:
    """What a worker reads of the stream for `agent` besides its consumer: its inputs, its recordings, and what it
    sent, its timers among them (rebuilding an instance, telling which of its inputs it handled, rearming timers
    after a restart)."""
    return (
        subjects.direct("*", agent),
        *(subjects.topic("*", topic) for topic in topics),
        subjects.rec("*", agent),
        subjects.direct("*", "*", agent),
        subjects.topic("*", "*", agent),
        subjects.event("*", "*", agent),
    )


def worker_reads(subjects: Subjects, shard: tuple[int, int] = (0, 1)) -> tuple[str, ...]:
    """What every worker reads of the stream: the completions and starts of its shard's episodes, the fault rules
    and every rule's applications (a rule's limits count them all), the helpers' roster."""
    return (
        *subjects.shard_events("completed", *shard),
        *subjects.shard_events("started", *shard),
        subjects.ctl("faults"),
        subjects.event("fault", "*"),
        subjects.ctl("helpers"),
    )


def agent_identity(
    subjects: Subjects,
    name: str,
    agents: Iterable[str],
    completers: Collection[str] = (),
    *,
    consumers: Iterable[str] = (),
    reads: Iterable[str] = (),
    durables: Iterable[str] = (),
    shard: tuple[int, int] = (0, 1),
    serves: Iterable[str] = (),
) -> Identity:
    """A process that speaks as `agents` (a worker group, or one shard of it): it publishes only as them, and
    answers the services it `serves`.

    Of its agents only `completers` (the environment) may complete an episode. It reads
    the stream through `consumers` (durable, the operator's `ConsumerSpec`s) and through
    short-lived consumers on `reads` (`agent_reads`, `worker_reads`), never under the name of
    one of the system's `durables` (every durable consumer's name). A `shard` (k, n) of a group
    speaks only in its own partitions (`Subjects.in_shard`), completions included, and hears only their
    completions.
    """
    agents = tuple(agents)
    publish, subscribe = _js_api(subjects, name, serves)
    own = tuple(
        narrowed
        for agent in agents
        for subject in (
            subjects.direct("*", "*", agent),
            subjects.topic("*", "*", agent),
            subjects.rec("*", agent),
            subjects.event("*", "*", agent),
        )
        for narrowed in subjects.in_shard(subject, *shard)
    )
    refused = (
        *(subjects.event("completed", "*", agent) for agent in agents if agent not in completers),
        *(subjects.event("started", "*", agent) for agent in agents),  # episodes start from the runner alone
    )
    publish = (*own, *publish, *_uses(subjects, consumers), *_reads(subjects, reads))
    completions = subjects.shard_events("completed", *shard)
    return Identity(name, publish, (*subscribe, *completions), (*refused, *_guards(subjects, durables)))


def recorder_identity(
    subjects: Subjects,
    name: str,
    agent: str,
    consumer: str,
    durables: Iterable[str] = (),
    serves: Iterable[str] = (),
) -> Identity:
    """A service that records calls as `agent` (the memory service's reflections) and answers the requests of
    the services it `serves`.

    It reads completions through its durable `consumer`, and whole episodes, every agent's messages
    of them (what it remembers), through short-lived consumers, never under the name of another of
    the system's `durables`.
    """
    publish, subscribe = _js_api(subjects, name, serves)
    completed = subjects.event("completed", "*")
    episodes = (subjects.direct("*", "*"), subjects.topic("*", "*"), subjects.rec("*", "*"), subjects.event("*", "*"))
    publish = (subjects.rec("*", agent), *publish, *_owns(subjects, consumer, completed), *_reads(subjects, episodes))
    return Identity(name, publish, subscribe, _guards(subjects, (d for d in durables if d != consumer)))


def journal_identity(
    subjects: Subjects,
    serves: Iterable[str],
    name: str = JOURNAL,
    consumer: str = JOURNAL,
    filters: Sequence[str] = (),
    peers: Iterable[str] = (),
) -> Identity:
    """A journal service (or one shard's) reads everything (a shard: its `filters`) through its durable `consumer`,
    answers the services it `serves` (the journal's), trims the stream of what it journaled and no episode needs
    any more (asking it where its episodes' messages begin), and speaks as nobody.

    The shard that trims the dead letters, which any shard may hold, asks how far the other shards' consumers
    `peers` are (their state only: it may not read, acknowledge or change them)."""
    publish, subscribe = _js_api(subjects, name, serves)
    filtered = filters[0] if len(filters) == 1 else ""  # one filter goes in the create subject
    trim = (f"$JS.API.STREAM.PURGE.{subjects.stream}", f"$JS.API.STREAM.MSG.GET.{subjects.stream}")
    floors = tuple(f"$JS.API.CONSUMER.INFO.{subjects.stream}.{peer}" for peer in peers)
    return Identity(name, (*publish, *trim, *floors, *_owns(subjects, consumer, filtered)), subscribe)


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
    consumers: Sequence[ConsumerSpec] = ()
    """The durable consumers the operator makes for the other identities (`Bus.ensure_consumers`)."""
    removed: tuple[Path, ...] = ()
    """The credential files `prepare` removed: of users its server configuration let in before and no longer does."""

    def credential_file(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def credential(self, name: str) -> Credential:
        return load_credential(self.credential_file(name))

    @property
    def server_config(self) -> Path:
        return self.folder / SERVER_CONFIG

    def prepare(self) -> Access:
        """Create each missing credential (kept ones are reused), write the server configuration, and remove the
        credentials of the users the configuration written before let in and this one does not (`removed`).

        The permissions are written afresh every time, so a changed worker layout
        takes effect at the next start without new passwords.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        before = _users_of(self.server_config)
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
        _write_private(self.server_config, _AUTHORIZATION + msgspec.json.encode({"users": users}) + b"\n")
        gone = sorted(before - {identity.name for identity in self.identities})
        return dataclasses.replace(self, removed=tuple(file for user in gone if (file := self._retire(user))))

    def _retire(self, user: str) -> Path | None:
        """Remove the credential file of `user`, and return it, when it is one this folder's `prepare` made: a file
        of the folder holding that user's credential (one put there in its place is left alone)."""
        path = self.credential_file(user)
        if path.parent != self.folder:
            return None
        try:
            if load_credential(path).user != user:
                return None
        except AccessError:
            return None
        path.unlink()
        return path


class _User(msgspec.Struct):
    user: str


class _Authorization(msgspec.Struct):
    users: list[_User]


def _users_of(server_config: Path) -> set[str]:
    """The users a server configuration `prepare` wrote lets in, whose credentials in the same folder it made: none
    where there is no such file or it is not one (`prepare` then leaves every file alone)."""
    try:
        text = server_config.read_bytes()
    except FileNotFoundError:
        return set()
    try:
        authorization = msgspec.json.decode(text.removeprefix(_AUTHORIZATION), type=_Authorization)
    except msgspec.DecodeError:
        return set()
    return {user.user for user in authorization.users}


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
