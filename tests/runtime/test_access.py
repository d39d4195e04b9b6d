"""Only who may speak on a subject can: forbidden publishes against a running system, from a plain NATS client.

Each case is something a process with a credential of the system tries beyond its
rights. The server refuses what the identity's permissions exclude; what it lets
through on the identity's own subjects but under another sender's name, the
receivers refuse (a dead letter). Either way the episode run meanwhile ends as it
would have, and the journal holds nothing forged but dead letters.

Reads likewise: a worker's credential may read only its own agents' inputs, so every
attempt on another worker's consumer, on its deliveries or on every inbox is refused.

The cases share one running system (per test process), each with an episode of its own,
and each reads the journal from where the stream stood when it began.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec
import pytest
import pytest_asyncio
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from faultline import SubscribeRefusedError
from faultline.api import RunPlan, plan_episodes, start_envelopes
from faultline.bus import JOURNAL, OPERATOR, Bus, FollowSettings, Login, publish_controls
from faultline.core import (
    DeadLetter,
    Envelope,
    EpisodeCompleted,
    Notice,
    Subjects,
    ToolCall,
    derive_id,
    encode,
)
from faultline.faults import FAULTS_CONTROL, add_rule_control, remove_rule_control
from faultline.journal import verify
from faultline.runtime import (
    HELPERS_CONTROL,
    JOURNAL_SERVICE,
    STATUS_SERVICE,
    Completions,
    helpers_served,
    parse_fault_spec,
    worker_identity,
    worker_statuses,
)
from faultline.runtime._episodes import PROCESS_SERVICE, READY
from faultline.runtime._supervisor import announce_ready
from tests.runtime.live import EPISODE_TIMEOUT_S, Running, held, journal_everything, live_system, raw_client, retail

pytestmark = pytest.mark.asyncio(loop_scope="module")

REFUSAL_TIMEOUT_S = 5.0
OUTSIDER = worker_identity("helpers")
"""A worker group of the system that runs the agent `verifier` and none of the episode's agents."""
MAIN = worker_identity("main")
"""The worker group that runs the episode's agents."""

S = Subjects()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """The system every case trespasses on, with the worker group `helpers` beside it (credentials only)."""
    folder = tmp_path_factory.mktemp("access")
    journal = folder / "journal.sqlite"
    async with held(live_system(folder, journal, groups={"helpers": ("verifier",)})) as supervisor:
        yield Running(supervisor, journal)
    assert verify(journal).ok  # and the journal the stopped system leaves holds


@dataclass(frozen=True)
class Forgery:
    identity: str
    forge: Callable[[str], tuple[str, Envelope]]
    """Episode -> (subject, envelope) to publish."""
    refused_by: str
    """"server" (the publish never reaches the stream) or "receiver" (stored, then dead-lettered)."""


def _call(episode: str, sender: str) -> Envelope:
    body = ToolCall(call_id="forged", name="cancel_pending_order", arguments={"order_id": "#W0000000"})
    return Envelope(id="forged-call", episode=episode, sender=sender, recipient="env", body=body)


def _completion(episode: str, sender: str) -> Envelope:
    body = EpisodeCompleted(outcome="failure", cause="forged")
    return Envelope(id="forged-completion", episode=episode, sender=sender, body=body)


def _fault_rule(_episode: str) -> tuple[str, Envelope]:
    control = add_rule_control(parse_fault_spec("storm:copies=3"), "forged")
    return S.ctl("faults"), control


FORGERIES = {
    "control-plane-without-the-operator": Forgery(OUTSIDER, _fault_rule, "server"),
    "worker-as-another-agent": Forgery(OUTSIDER, lambda e: (S.direct(e, "env", "tool"), _call(e, "tool")), "server"),
    "worker-as-another-agent-on-its-own-subject": Forgery(
        OUTSIDER, lambda e: (S.direct(e, "env", "verifier"), _call(e, "tool")), "receiver"
    ),
    "forged-completion": Forgery(OUTSIDER, lambda e: (S.event("completed", e, "env"), _completion(e, "env")), "server"),
    "forged-completion-as-its-own-agent": Forgery(
        OUTSIDER, lambda e: (S.event("completed", e, "verifier"), _completion(e, "verifier")), "server"
    ),
    "completion-by-an-agent-that-may-not-complete": Forgery(
        MAIN, lambda e: (S.event("completed", e, "tool"), _completion(e, "tool")), "server"
    ),
    "journal-service-speaking": Forgery(
        JOURNAL, lambda e: (S.event("completed", e, "env"), _completion(e, "env")), "server"
    ),
    "journal-service-controlling": Forgery(JOURNAL, _fault_rule, "server"),
    "completion-by-an-agent-that-may-not-complete-with-the-operators-credential": Forgery(
        OPERATOR, lambda e: (S.event("completed", e, "tool"), _completion(e, "tool")), "receiver"
    ),
}


@pytest.mark.parametrize("case", FORGERIES)
async def test_a_forbidden_publish_is_refused_and_the_run_is_unchanged(case: str, running: Running) -> None:
    forgery = FORGERIES[case]
    plan = RunPlan(tasks=1, run_id=f"forged{list(FORGERIES).index(case)}")
    (planned,) = plan_episodes(plan, retail())
    subject, forged = forgery.forge(planned.episode)
    supervisor = running.supervisor
    bus = supervisor.bus
    assert bus is not None
    since = await running.since()
    refusals: list[str] = []
    refused = anyio.Event()

    async def on_error(exc: Exception) -> None:
        refusals.append(str(exc))
        refused.set()

    raw = await raw_client(supervisor, forgery.identity, error_cb=on_error)
    async with Completions(bus) as completions:
        await bus.publish_all(start_envelopes(plan, planned)[:1])  # the episode exists: its start is journaled
        try:
            if forgery.refused_by == "server":
                await raw.publish(subject, encode(forged))
                with anyio.fail_after(REFUSAL_TIMEOUT_S):
                    await refused.wait()
                assert refusals == [f'nats: permissions violation for publish to "{subject}"']
                forged_seq = 0
            else:
                forged_seq = (await raw.jetstream().publish(subject, encode(forged))).seq
        finally:
            await raw.close()
        await bus.publish_all(start_envelopes(plan, planned)[1:])
        with anyio.fail_after(EPISODE_TIMEOUT_S):
            done = await completions.wait([planned.episode])
    assert (done[planned.episode].outcome, done[planned.episode].cause) == ("success", "")
    await journal_everything(bus)

    rows = running.rows_after(since)
    completions_journaled = [
        (r.sender, body.outcome)
        for r in rows
        if r.episode == planned.episode and isinstance(body := r.decoded_body(), EpisodeCompleted)
    ]
    assert completions_journaled == [("env", "success")]  # what the run printed is the journal's truth
    assert forged.id not in {r.id for r in rows}
    letters = [body for r in rows if isinstance(body := r.decoded_body(), DeadLetter)]
    if forgery.refused_by == "server":
        assert letters == []
    else:
        # One from each process that refused it (the receiver, the journal), all naming the forgery.
        assert 1 <= len(letters) <= 2 and {(letter.stream_seq, letter.subject) for letter in letters} == {
            (forged_seq, subject)
        }, letters
        assert all(letter.reason.endswith("at `$.sender`") for letter in letters), letters
        if forgery.identity == OPERATOR:  # the server lets the operator through: the journal service refuses it
            assert [letter.reason for letter in letters if letter.reason.startswith("completion refused: 'tool'")]
    assert verify(running.journal).ok


def _starts(starts: list[str]) -> list[str]:
    return starts


def _first_outputs(starts: list[str]) -> list[str]:
    """The ids the main group's agents derive for what they send, record or fail on, as they handle the starts."""
    return [derive_id(start, i, family) for start in starts for family in "orqe" for i in range(3)]


SQUATS = {
    "the-runners-starts-by-a-worker-of-the-episode": (MAIN, "env", _starts),
    "the-runners-starts-by-another-group": (OUTSIDER, "verifier", _starts),
    "another-groups-outputs": (OUTSIDER, "verifier", _first_outputs),
}


@pytest.mark.parametrize("case", SQUATS)
async def test_ids_others_will_publish_under_cannot_be_taken_first(case: str, running: Running) -> None:
    """An envelope's id is derived from what others read (an episode's id, the message it answers), so a credential
    can work out the ids the runner's starts, or another group's outputs, will have, and publish its own notices
    under them first, for the stream to drop those as duplicates: the episode would wait for its timeout. The stream
    knows each identity's envelopes by ids keyed by its credential, which no other can foresee."""
    identity, sender, squatted = SQUATS[case]
    plan = RunPlan(tasks=1, run_id=f"squat{list(SQUATS).index(case)}")
    (planned,) = plan_episodes(plan, retail())
    supervisor = running.supervisor
    assert supervisor.bus is not None
    raw = await raw_client(supervisor, identity)
    try:
        js = raw.jetstream()
        for i, taken in enumerate(squatted([env.id for env in start_envelopes(plan, planned)])):
            notice = Envelope(id=f"squat-{case}-{i}", episode=planned.episode, sender=sender, body=Notice(text="mine"))
            subject = S.event("notice", planned.episode, sender)
            await js.publish(subject, encode(notice), headers={"Nats-Msg-Id": taken})
    finally:
        await raw.close()
    async with Completions(supervisor.bus) as completions:
        await supervisor.bus.publish_all(start_envelopes(plan, planned))
        with anyio.fail_after(EPISODE_TIMEOUT_S):
            done = await completions.wait([planned.episode])
    assert (done[planned.episode].outcome, done[planned.episode].cause) == ("success", "")


STREAM = S.stream
THEIRS = "agent-tool-0of1"
"""The consumer of the main worker's agent `tool`, delivering into the main worker's inbox."""


@dataclass(frozen=True)
class Trespass:
    act: str
    """"publish" (a JetStream API request or an ack) or "subscribe"."""
    subject: str
    payload: bytes = b""


def _create(name: str, filter_subject: str) -> Trespass:
    """Making consumer `name`, or changing it if it exists: its filter and deliveries to the trespasser's inbox."""
    config = {"name": name, "deliver_subject": "_INBOX.worker-helpers.spy", "filter_subject": filter_subject}
    subject = f"$JS.API.CONSUMER.CREATE.{STREAM}.{name}" + ("" if filter_subject == ">" else f".{filter_subject}")
    return Trespass("publish", subject, msgspec.json.encode({"stream_name": STREAM, "config": config}))


TRESPASSES = {
    "a-consumer-on-everything": _create("spy", ">"),
    "a-consumer-on-another-agents-inputs": _create("spy", S.direct("*", "tool")),
    "another-workers-consumer-pointed-at-its-own-filter": _create(THEIRS, S.direct("*", "verifier")),
    "a-consumer-without-a-name": Trespass("publish", f"$JS.API.CONSUMER.CREATE.{STREAM}"),
    "deleting-another-workers-consumer": Trespass("publish", f"$JS.API.CONSUMER.DELETE.{STREAM}.{THEIRS}"),
    "reading-another-workers-consumer": Trespass("publish", f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{THEIRS}", b"1"),
    "the-state-of-another-workers-consumer": Trespass("publish", f"$JS.API.CONSUMER.INFO.{STREAM}.{THEIRS}"),
    "resetting-another-workers-consumer": Trespass("publish", f"$JS.API.CONSUMER.RESET.{STREAM}.{THEIRS}"),
    "acknowledging-for-another-worker": Trespass("publish", f"$JS.ACK.{STREAM}.{THEIRS}.1.1.1.1.0", b"+ACK"),
    "another-workers-deliveries": Trespass("subscribe", f"_INBOX.{worker_identity('main')}.{THEIRS}"),
    "every-inbox": Trespass("subscribe", "_INBOX.>"),
}


@pytest.mark.parametrize("case", TRESPASSES)
async def test_a_forbidden_read_is_refused_and_the_run_is_unchanged(case: str, running: Running) -> None:
    trespass = TRESPASSES[case]
    plan = RunPlan(tasks=1, run_id=f"spied{list(TRESPASSES).index(case)}")
    (planned,) = plan_episodes(plan, retail())
    supervisor = running.supervisor
    bus = supervisor.bus
    assert bus is not None
    since = await running.since()
    refusals: list[str] = []
    refused = anyio.Event()
    seen: list[bytes] = []

    async def on_error(exc: Exception) -> None:
        refusals.append(str(exc))
        refused.set()

    async def on_msg(msg: Msg) -> None:
        seen.append(msg.data)

    raw = await raw_client(supervisor, OUTSIDER, error_cb=on_error)
    async with Completions(bus) as completions:
        try:
            await _trespass(raw, trespass, on_msg)
            with anyio.fail_after(REFUSAL_TIMEOUT_S):
                await refused.wait()
            what = "publish" if trespass.act == "publish" else "subscription"
            expected = f'nats: permissions violation for {what} to "{trespass.subject}"'
            assert [r.lower() for r in refusals] == [expected.lower()]
            await bus.publish_all(start_envelopes(plan, planned))
            with anyio.fail_after(EPISODE_TIMEOUT_S):
                done = await completions.wait([planned.episode])
            await raw.flush()
        finally:
            await raw.close()
    assert seen == []  # no answer, no delivery came to the trespasser
    assert (done[planned.episode].outcome, done[planned.episode].cause) == ("success", "")
    await journal_everything(bus)
    consumers = {info.name for info in await bus.js.consumers_info(STREAM)}
    assert THEIRS in consumers and "spy" not in consumers
    rows = running.rows_after(since)
    assert [r.episode for r in rows if isinstance(r.decoded_body(), EpisodeCompleted)] == [planned.episode]
    assert not [r for r in rows if isinstance(r.decoded_body(), DeadLetter)]
    assert verify(running.journal).ok


async def _trespass(raw: NatsClient, trespass: Trespass, on_msg: Callable[[Msg], Awaitable[None]]) -> None:
    if trespass.act == "subscribe":
        await raw.subscribe(trespass.subject, cb=on_msg)
        return
    inbox = raw.new_inbox()
    await raw.subscribe(inbox, cb=on_msg)  # its own inbox: where an answer would come
    await raw.publish(trespass.subject, trespass.payload, reply=inbox)


async def test_a_worker_started_by_hand_for_a_consumer_up_did_not_make_is_told_so_in_one_line(
    running: Running, tmp_path: Path
) -> None:
    supervisor = running.supervisor
    assert supervisor.access is not None
    creds = supervisor.access.credential_file(MAIN)
    command = ["worker", "--agents", "tool", "--shard", "1/2", "--nats", supervisor.url, "--creds", str(creds)]
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-m", "faultline.cli", *command], check=False, cwd=tmp_path)
    said = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" not in said, said
    last = said.strip().splitlines()[-1]  # after the worker's log lines
    assert last.startswith("faultline: error: consumer agent-tool-1of2 is not one the operator made"), last
    assert "start the system with `faultline up`" in last


async def test_a_question_nested_too_deep_gets_the_journals_state_and_the_next_question_its_answer(
    running: Running,
) -> None:
    raw = await raw_client(running.supervisor)
    try:
        deep = b'{"until": 0, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        first = await raw.request(S.svc(JOURNAL_SERVICE), deep, timeout=REFUSAL_TIMEOUT_S)
        assert "stuck" in msgspec.json.decode(first.data)  # answered at once with the state, as a question of nothing
        until = await running.since()
        second = await raw.request(S.svc(JOURNAL_SERVICE), msgspec.json.encode({"until": until}), timeout=30)
        assert msgspec.json.decode(second.data)["last_seq"] >= until
    finally:
        await raw.close()


@pytest.mark.parametrize(
    "answer",
    [b"[" * 100_000 + b"]" * 100_000, b'{"pid": 1}', b"\xff not json", b'{"worker": "worker", "agents": ["forged"]}'],
)
async def test_a_forged_status_answer_is_left_out_or_shown_as_its_tellers(answer: bytes, running: Running) -> None:
    """A worker's credential may answer status requests, as every worker does: what it sends is anyone's guess.
    `faultline status` failed on an answer that was not a worker's status (a KeyError, a RecursionError), and
    listed a status sent in another worker's name as that worker's. Answers are told under the teller's own NATS
    user now, which the server vouches for: one in another's name is refused, one in its own is shown as its."""
    bus = running.supervisor.bus
    assert bus is not None
    raw = await raw_client(running.supervisor, OUTSIDER)
    forged = 0

    async def forge(msg: Msg) -> None:
        nonlocal forged
        token = msgspec.json.decode(msg.data)["token"]
        await raw.publish(S.tell(STATUS_SERVICE, MAIN, token), answer)  # the real worker's name: refused
        await raw.publish(S.tell(STATUS_SERVICE, OUTSIDER, token), answer)
        forged += 1

    try:
        await raw.subscribe(S.svc(STATUS_SERVICE), cb=forge)
        await raw.flush()
        with anyio.fail_after(30):
            while True:  # on a busy machine an answer may come after the window: ask until both came within it
                before = forged
                statuses = await worker_statuses(bus)
                if forged > before and any(status.identity == MAIN for status in statuses):
                    break
    finally:
        await raw.close()
    told = [(status.worker, status.identity, status.agents) for status in statuses]
    assert [status for status in told if status[1] != OUTSIDER] == [("worker", MAIN, ["env", "tool", "user"])]
    assert [status for status in told if status[1] == OUTSIDER] == (
        [("worker", OUTSIDER, ["forged"])] if b"forged" in answer else []
    )


async def test_a_credential_that_may_not_hear_the_workers_answers_is_told_so(running: Running, tmp_path: Path) -> None:
    """The workers tell their status answers to the operator alone: asked with another credential, `status` said
    "0 worker(s)" as if none ran. The API raises the server's refusal; the command says so in one line first."""
    supervisor = running.supervisor
    assert supervisor.access is not None
    bus = await Bus.connect(supervisor.url, name="not-the-operator", login=Login(supervisor.access.credential(MAIN)))
    try:
        with pytest.raises(SubscribeRefusedError, match="worker-main.*permission to hear fl.svc.status"):
            await worker_statuses(bus)
    finally:
        await bus.close()
    creds = supervisor.access.credential_file(MAIN)
    command = ["status", "--nats", supervisor.url, "--creds", str(creds)]
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-m", "faultline.cli", *command], check=False, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.decode() == (
        "faultline: usage error: status: the workers tell their answers to the operator alone; 'worker-main' may"
        " not hear them\n"
    )


async def test_a_process_is_taken_for_ready_only_under_the_user_it_was_started_as(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    """`up` waits for each process it starts to say that it serves. Anyone could say so for any process, and `up`
    went on as if a process that had not started yet served."""
    supervisor = running.supervisor
    assert supervisor.access is not None and supervisor.bus is not None
    ready = supervisor._ready["late"] = anyio.Event()  # a process of MAIN's the supervisor waits for
    supervisor._tellers["late"] = MAIN
    said = msgspec.json.encode({"name": "late", "pid": 1})
    raw = await raw_client(supervisor, OUTSIDER)
    try:
        await raw.publish(S.tell(PROCESS_SERVICE, MAIN, READY), said)  # in the name of MAIN's user: refused
        await raw.publish(S.tell(PROCESS_SERVICE, OUTSIDER, READY), said)
        with anyio.fail_after(REFUSAL_TIMEOUT_S):
            while "ignoring 'late'" not in caplog.text:
                await anyio.sleep(0.01)
        assert not ready.is_set()
        real = await Bus.connect(supervisor.url, name="late", login=Login(supervisor.access.credential(MAIN)))
        try:
            await announce_ready(real, "late")
            with anyio.fail_after(REFUSAL_TIMEOUT_S):
                await ready.wait()
        finally:
            await real.close()
    finally:
        await raw.close()
        del supervisor._ready["late"], supervisor._tellers["late"]
    assert f"told by NATS user {OUTSIDER!r}: it was started as {MAIN!r}" in caplog.text


async def test_a_worker_cannot_confirm_a_fault_rule_for_another(running: Running) -> None:
    """A command that puts a fault rule in force waits for each worker to say it took the rule in. Any worker's
    credential could say so in any worker's name, and the command went on before the rule was in force."""
    bus = running.supervisor.bus
    assert bus is not None
    raw = await raw_client(running.supervisor, OUTSIDER)
    taken = msgspec.json.encode({"worker": "elsewhere", "seq": 2**40})

    async def forge(_: Msg) -> None:
        await raw.publish(S.tell(FAULTS_CONTROL, MAIN, "taken"), taken)  # in the name of main's credential: refused
        await raw.publish(S.tell(FAULTS_CONTROL, OUTSIDER, "taken"), taken)

    try:
        await raw.subscribe(S.svc(FAULTS_CONTROL), cb=forge)
        await raw.flush()
        control = remove_rule_control("nothing-to-remove", "forged-confirmations")
        settings = FollowSettings(confirm_timeout_s=2)
        result = await publish_controls(bus, [control], workers=[(MAIN, "elsewhere")], settings=settings)
    finally:
        await raw.close()
    assert result["missing"] == [f"elsewhere (user {MAIN})"]


async def test_only_the_helpers_group_may_answer_for_the_helper_pool(running: Running) -> None:
    """Every worker group could answer `faultline helpers list` and tell that it took a roster in; only the group
    that runs the helper pool (`helpers`) may now."""
    bus = running.supervisor.bus
    assert bus is not None
    refused = anyio.Event()

    async def on_error(exc: Exception) -> None:
        if "permissions violation" in str(exc).lower():
            refused.set()

    raw = await raw_client(running.supervisor, MAIN, error_cb=on_error)

    async def forge(msg: Msg) -> None:
        await msg.respond(msgspec.json.encode({"served": ["forged"]}))

    try:
        await raw.subscribe(S.svc(HELPERS_CONTROL), cb=forge)
        with anyio.fail_after(REFUSAL_TIMEOUT_S):
            await refused.wait()
        assert await helpers_served(bus, 1.0) is None
    finally:
        await raw.close()


@pytest.mark.parametrize("answer", [b"\xff not json", b'{"served": 5}', b"[" * 100_000 + b"]" * 100_000])
async def test_a_forged_answer_about_the_helpers_served_is_no_answer(answer: bytes, running: Running) -> None:
    """A worker's credential may answer what the helper pool is asked: `faultline helpers list` ended in a
    traceback (UnicodeDecodeError, TypeError, RecursionError) on such an answer."""
    bus = running.supervisor.bus
    assert bus is not None
    raw = await raw_client(running.supervisor, OUTSIDER)

    async def forge(msg: Msg) -> None:
        await msg.respond(answer)

    try:
        await raw.subscribe(S.svc(HELPERS_CONTROL), cb=forge)
        await raw.flush()
        assert await helpers_served(bus, REFUSAL_TIMEOUT_S) is None
    finally:
        await raw.close()
