"""Credentials and permissions: made once, private, enforced by nats-server, refused in one line."""

from __future__ import annotations

import logging
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from faultline._errors import AccessError, PublishRefusedError
from faultline.bus import (
    OPERATOR,
    Access,
    Bus,
    Consumer,
    Credential,
    Delivery,
    EmbeddedServer,
    Login,
    Message,
    agent_identity,
    agent_reads,
    journal_identity,
    operator_identity,
)
from faultline.cli import main
from faultline.core import Envelope, EpisodeStarted, Note, Subjects

S = Subjects()
REFUSAL_TIMEOUT_S = 5.0


def access(folder: Path) -> Access:
    return Access(
        folder, (operator_identity(), journal_identity(S, ("journal",)), agent_identity(S, "worker-main", ("tool",)))
    ).prepare()


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[EmbeddedServer, Access]]:
    """A nats-server that lets in only the users of `access`, with their permissions, included from a node's own
    configuration as a cluster node's would (`docs/multi-host.md`)."""
    granted = access(tmp_path / "credentials")
    node = granted.folder / "node.conf"
    node.write_text(f"server_name: node-1\ninclude ./{granted.server_config.name}\n")
    with EmbeddedServer(store_dir=tmp_path / "nats", config_file=node) as server:
        yield server, granted


@pytest.fixture
async def operator_bus(secured: tuple[EmbeddedServer, Access]) -> AsyncIterator[Bus]:
    server, granted = secured
    bus = await Bus.connect(server.url, login=Login(granted.credential(OPERATOR)))
    await bus.ensure_stream()
    try:
        yield bus
    finally:
        await bus.close()


def test_credentials_are_made_once_readable_by_their_owner_only(tmp_path: Path) -> None:
    first = access(tmp_path / "credentials")
    passwords = {name: first.credential(name).password for name in (OPERATOR, "journal", "worker-main")}
    again = access(tmp_path / "credentials")
    assert {name: again.credential(name).password for name in passwords} == passwords
    assert len(set(passwords.values())) == 3
    assert stat.S_IMODE(first.folder.stat().st_mode) == 0o700
    for path in [first.server_config, *(first.credential_file(name) for name in passwords)]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    users = msgspec.json.decode(first.server_config.read_bytes().removeprefix(b"authorization: "))["users"]
    assert {(u["user"], u["password"]) for u in users} == {(name, p) for name, p in passwords.items()}


# The client library hands the server's errors on in lower case: an episode id in capitals is still matched.
@pytest.mark.parametrize("episode", ["e1", "Order-7"])
async def test_a_publish_outside_the_permissions_is_refused_at_once_naming_the_credential(
    secured: tuple[EmbeddedServer, Access], operator_bus: Bus, caplog: pytest.LogCaptureFixture, episode: str
) -> None:
    server, granted = secured
    worker = await Bus.connect(server.url, name="worker-main", login=Login(granted.credential("worker-main")))
    try:
        await worker.publish(Envelope(id="ok", episode=episode, sender="tool", recipient="user", body=Note()))
        forged = Envelope(id="forged", episode=episode, sender="user", recipient="tool", body=Note())
        with anyio.fail_after(REFUSAL_TIMEOUT_S), pytest.raises(PublishRefusedError) as refused:
            await worker.publish(forged)
    finally:
        await worker.close()
    assert f"NATS refused worker-main (user 'worker-main') permission to publish on fl.ep.{episode}.tool.user" in str(
        refused.value
    )
    assert not [r for r in caplog.records if r.levelno == logging.ERROR]  # said once: by the error raised
    assert (await operator_bus.stream_state()).messages == 1


async def test_a_follower_refused_its_consumer_says_so_instead_of_asking_for_ever(
    secured: tuple[EmbeddedServer, Access], operator_bus: Bus
) -> None:
    server, granted = secured
    worker = await Bus.connect(server.url, name="worker-main", login=Login(granted.credential("worker-main")))

    async def take(_: Delivery) -> None:
        raise AssertionError("nothing may be read")

    try:
        with anyio.fail_after(2 * REFUSAL_TIMEOUT_S), pytest.raises(PublishRefusedError) as refused:
            await worker.follow(S.dlq, take, after=0)
    finally:
        await worker.close()
    assert f"NATS refused worker-main (user 'worker-main') a consumer of {S.dlq} on stream {S.stream}" in str(
        refused.value
    )


@pytest.mark.parametrize(
    ("login", "says"),
    [
        (None, "wants a credential: pass --creds FILE"),
        (Credential(user="worker-main", password="guessed"), "refused the credential of user 'worker-main'"),
    ],
)
async def test_a_missing_or_wrong_credential_is_refused(
    secured: tuple[EmbeddedServer, Access], login: Credential | None, says: str
) -> None:
    server, _ = secured
    with pytest.raises(AccessError) as refused:
        await Bus.connect(server.url, login=Login(login))
    assert says in str(refused.value)


def test_the_credentials_command_makes_them_once_for_the_configured_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "faultline.toml"
    config.write_text('[workers.front]\nagents = ["user"]\n[workers.back]\nagents = ["*"]\n')
    folder = tmp_path / "secrets"
    passwords = []
    for _ in range(2):
        assert main(["credentials", "--config", str(config), "--dir", str(folder)]) == 0
        passwords.append({p.name: p.read_bytes() for p in folder.glob("*.json")})
    assert passwords[0] == passwords[1]
    identities = ("operator", "journal", "memory", "worker-front", "worker-back", "worker-helpers")  # those `up` runs
    assert set(passwords[0]) == {f"{n}.json" for n in identities}
    out = capsys.readouterr().out
    assert f"{folder / 'nats-server.conf'}: every NATS node's users and permissions" in out


def test_the_credentials_command_removes_those_of_workers_a_lowered_count_no_longer_has(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each shard of a partitioned group, and of the journal, has a credential of its own: after the counts were
    lowered, the files of the shards that no longer exist were left beside the others, as if still in use. They are
    removed, and said to be; files the command did not make stay, a credential put in the place of one it did too."""
    config = tmp_path / "faultline.toml"
    folder = tmp_path / "secrets"
    layout = '[workers.main]\nagents = ["*"]\ncount = {}\n[journal]\nshards = {}\n'
    config.write_text(layout.format(3, 2))
    assert main(["credentials", "--config", str(config), "--dir", str(folder)]) == 0
    kept = {
        "node.conf": b"include ./nats-server.conf\n",
        "other.json": msgspec.json.encode(Credential(user="other", password="p")),
    }
    kept["worker-main-2of3.json"] = msgspec.json.encode(Credential(user="someone-else", password="p"))
    for name, data in kept.items():
        (folder / name).write_bytes(data)
    passwords = {p.name: p.read_bytes() for p in folder.glob("*.json")}
    capsys.readouterr()

    config.write_text(layout.format(2, 1))
    assert main(["credentials", "--config", str(config), "--dir", str(folder)]) == 0
    removed = ["journal-0.json", "journal-1.json", "worker-main-0of3.json", "worker-main-1of3.json"]
    made = ["journal.json", "worker-main-0of2.json", "worker-main-1of2.json"]
    same = ["operator.json", "memory.json", "worker-helpers.json"]
    assert sorted(p.name for p in folder.iterdir()) == sorted([*made, *same, *kept, "nats-server.conf"])
    assert all((folder / name).read_bytes() == data for name, data in kept.items())
    assert all((folder / name).read_bytes() == passwords[name] for name in same)
    out = " ".join(capsys.readouterr().out.split())
    assert f"removed {', '.join(str(folder / name) for name in removed)}: the configuration no longer has" in out
    users = msgspec.json.decode((folder / "nats-server.conf").read_bytes().removeprefix(b"authorization: "))["users"]
    assert sorted(u["user"] for u in users) == sorted(name.removesuffix(".json") for name in [*made, *same])


@pytest.mark.parametrize("creds", ["none", "wrong", "missing-file"])
def test_a_worker_without_its_credential_cannot_connect_and_says_so_in_one_line(
    secured: tuple[EmbeddedServer, Access], tmp_path: Path, creds: str
) -> None:
    server, granted = secured
    wrong = tmp_path / "wrong.json"
    wrong.write_bytes(
        msgspec.json.encode(Credential(user="worker-main", password=granted.credential(OPERATOR).password))
    )
    flags = {"none": [], "wrong": ["--creds", str(wrong)], "missing-file": ["--creds", str(tmp_path / "nowhere.json")]}
    config = tmp_path / "faultline.toml"
    config.write_text("")
    run = subprocess.run(
        [sys.executable, "-m", "faultline.cli", "worker", "--nats", server.url, "--agents", "tool"]
        + ["--config", str(config), *flags[creds]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    expected = {
        "none": "wants a credential",
        "wrong": "refused the credential of user 'worker-main': wrong user or password",
        "missing-file": "nowhere.json does not exist",
    }[creds]
    assert run.stderr.startswith("faultline: error: ") and expected in run.stderr, run.stderr


async def test_only_a_service_answers_its_questions_or_speaks_in_its_name(
    secured: tuple[EmbeddedServer, Access], operator_bus: Bus
) -> None:
    """A worker that answered `svc.journal` could tell every runner that the journal cannot write, and stop every
    run; nats-server lets only the journal subscribe there and tell its state, under its own name alone."""
    server, granted = secured
    worker = await Bus.connect(server.url, name="worker-main", login=Login(granted.credential("worker-main")))
    journal = await Bus.connect(server.url, name="journal", login=Login(granted.credential("journal")))
    heard: list[bytes] = []
    asked = anyio.Event()

    async def forge(msg: object) -> None:
        raise AssertionError("the worker heard a question to the journal")

    async def answer(msg: Message) -> None:
        await msg.respond(b'{"journal": "the real one"}')

    async def hear(msg: Message) -> None:
        heard.append(msg.data)
        if msg.data == b"after":
            asked.set()

    try:
        await worker.subscribe(S.svc("journal"), forge)
        await journal.subscribe(S.svc("journal"), answer)
        await operator_bus.subscribe(S.svc(">"), hear)
        await worker.nc.flush()
        await journal.nc.flush()
        assert await operator_bus.request(S.svc("journal"), b"{}", REFUSAL_TIMEOUT_S) == b'{"journal": "the real one"}'
        for teller in ("journal", "worker-main"):
            await worker.notify(S.tell("journal", teller, "state"), b'{"stuck": "forged"}')
        await worker.notify(S.svc("status"), b"after")  # delivered after the forgery would have been: in order
        with anyio.fail_after(REFUSAL_TIMEOUT_S):
            await asked.wait()
    finally:
        await worker.close()
        await journal.close()
    assert b'{"stuck": "forged"}' not in heard


async def test_an_agent_may_not_start_an_episode(secured: tuple[EmbeddedServer, Access], operator_bus: Bus) -> None:
    """Episodes start from the runner: a start in an agent's name (one that named helpers there are not, or a
    domain that does not load) reached every helper pool and every replay of the journal."""
    server, granted = secured
    worker = await Bus.connect(server.url, name="worker-main", login=Login(granted.credential("worker-main")))
    try:
        started = Envelope(id="forged", episode="e1", sender="tool", body=EpisodeStarted(domain="retail"))
        with anyio.fail_after(REFUSAL_TIMEOUT_S), pytest.raises(PublishRefusedError, match="fl.ev.started.e1.tool"):
            await worker.publish(started)
    finally:
        await worker.close()
    assert (await operator_bus.stream_state()).messages == 0


async def test_a_question_to_the_stream_that_the_credential_may_not_ask_says_so(
    secured: tuple[EmbeddedServer, Access], operator_bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused, a JetStream API request only times out: the asker names the refusal instead (`faultline status`
    with a worker's credential said "nats: timeout", after a log line naming the operator)."""
    server, granted = secured
    worker = await Bus.connect(server.url, name="worker-main", login=Login(granted.credential("worker-main")))
    try:
        with anyio.fail_after(30), pytest.raises(PublishRefusedError) as refused:
            await worker.unacknowledged("journal")
    finally:
        await worker.close()
    assert str(refused.value) == (
        "NATS refused worker-main (user 'worker-main') asking for the state of consumer journal: the credential it"
        " connected with may not (the operator's may)"
    )
    assert not [r for r in caplog.records if r.levelno == logging.ERROR]


async def test_a_workers_read_of_what_was_trimmed_meanwhile_ends_without_asking_for_its_readers_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker may not ask for the state of a consumer (its configuration would show others' too): its reader's idle
    heartbeats tell it that the reader has sent all it holds once the journal trimmed what it was opened on."""
    reader = agent_identity(S, "worker-main", ("tool",), reads=agent_reads(S, "tool"))
    granted = Access(tmp_path / "credentials", (operator_identity(), reader)).prepare()
    with EmbeddedServer(store_dir=tmp_path / "nats", config_file=granted.server_config) as server:
        operator_bus = await Bus.connect(server.url, login=Login(granted.credential(OPERATOR)))
        await operator_bus.ensure_stream()
        try:
            await read_trimmed(operator_bus, server, granted, monkeypatch)
        finally:
            await operator_bus.close()


async def read_trimmed(
    operator_bus: Bus, server: EmbeddedServer, granted: Access, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = [Envelope(id=f"m{i}", episode="e1", sender="user", recipient="tool", body=Note(text="x")) for i in (1, 2)]
    await operator_bus.publish_all(inputs)
    worker = await Bus.connect(server.url, name="worker-main", login=Login(granted.credential("worker-main")))
    start = Consumer._start

    async def trimmed_first(consumer: Consumer) -> None:
        """Opened on the 2 inputs, which are trimmed before it can deliver them (it delivers once someone listens)."""
        await operator_bus.trim_stream(["fl.ep.e1.>"], below=3)
        await start(consumer)

    monkeypatch.setattr(Consumer, "_start", trimmed_first)
    try:
        with anyio.fail_after(REFUSAL_TIMEOUT_S):
            assert await worker.read_envelopes(["fl.ep.e1.tool.*"], timeout_s=REFUSAL_TIMEOUT_S) == []
    finally:
        await worker.close()
