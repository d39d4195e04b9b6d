"""The journal service: copies the stream into the SQLite journal, batch by batch.

It reads through one ack-all consumer and acknowledges a batch only after the
batch is committed, so the file never runs ahead of the stream's record of what
was journaled. On start it resumes right after the last sequence in the file
(not after the consumer's ack floor), so a kill -9 at any point leaves neither a
gap nor a duplicate.

Deliveries travel over core NATS, which drops them when the service's server or
a route to it is lost (a paused node of a cluster): a batch is journaled only up
to the first sequence that skips ahead, since acknowledging a later one would
acknowledge the lost ones unseen, and the stream is read again from the file's
last sequence. When nothing comes after the lost ones, the consumer's idle
heartbeat names the last delivery sent, and the stream is read again the same way. The service trims the
stream only of what it wrote (`trim_after_s`, `runtime._trimming`), so only an operator deleting messages, or
a journal file older than the stream's trims, leaves it a gap; a fresh consumer's first delivery proves one,
and the service logs the sequences the journal will never hold. It trims the dead letters too, which nothing
but the journal reads: once every journal shard has journaled them, since any shard may hold one (`_trim`).

Bytes that are not an envelope go to the dead-letter subject, and come back
through the stream to be journaled there; so does a message SQLite refuses to
store, and a completion whose sender may not complete an episode (only the
runner and the completing agents may; the server refuses any other but the
operator's, so one that comes anyway is a forgery with the operator's credential).

With `shards` > 1 the service is shard `shard` of a journal set (`journal.create_set`) and
journals the messages of the episodes the partition gives it (`core.episode_shard`). Where the
subjects are partitioned (`core.Subjects`), its consumer is filtered on the server to its
partitions and the controls and dead letters (rare; each is decoded for its episode), so it is
delivered only its own and those; its deliveries then skip the others' sequences, and it has
reached the stream's end when its consumer has nothing left to deliver. Otherwise it reads the whole stream, passes over another
shard's messages undecoded (the episode is read from the subject; a control or a dead letter,
whose subject names no episode, is decoded for it) and acknowledges them with its own. Every shard answers questions on `<prefix>.svc.journal`, naming itself, and the
asker waits for all (`runtime.ask_journal`).

When the file cannot be written (disk full, read-only, I/O error) the service
says so once (in its log, and on `<prefix>.svc.journal.<user>.state`), answers every
question with the reason (the runner then refuses new episodes), leaves every
message in the stream, and retries the same batch with backoff; once it is
written, the service says so, resumes from the file and catches up.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path

import anyio
import msgspec
from anyio.abc import TaskGroup

from faultline._errors import BusError, DecodeError, DeliveriesLostError, JournalError, JournalStorageError
from faultline.bus import JOURNAL, Bus, Consumer, Delivery, Message, asked_again, decode_notice, tell
from faultline.core import RUNNER, Envelope, EpisodeCompleted, body_bytes, decode_envelope, episode_shard
from faultline.journal import Incoming, Journal, create_set, shard_path
from faultline.runtime._episodes import JOURNAL_SERVICE, JOURNAL_STATE
from faultline.runtime._trimming import EpisodesKept

CONSUMER = "journal"
BATCH_LIMIT = 5_000
BATCH_GATHER_S = 0.05
"""How long a short batch waits for more messages while nobody waits for them: a transaction per few messages
costs a shard, which is delivered a part of the stream, two to three times the CPU per row of one journal."""
MAX_ACK_PENDING = 100_000
REACH_RETRY_S = 0.1
"""How soon a filtered shard asks again whether it reached the stream's end, while someone waits and its consumer
was not settled when it asked: its last acknowledgement may not have been counted yet, and no batch may come."""
TRIM_EVERY_S = 10.0
"""How often a journal service that trims the stream (`trim_after_s`) looks for what it may trim: a dead letter
leaves the stream within about this long of its journaling."""
MAX_WAITING = 256
"""Questions (`until`) left waiting at most: a runner asks one at a time, so more are a flood, and the oldest is
answered at once with what the journal holds (a question for a sequence the stream never reaches would wait for
ever, and every new one would cost a look at all)."""

log = logging.getLogger(__name__)


def journal_process(shard: int, shards: int) -> str:
    """The process name, and identity, of journal shard `shard` of `shards`."""
    return JOURNAL if shards == 1 else f"{JOURNAL}-{shard}"


ANY_COMPLETER = "*"
"""`journal serve --completers *`: every completion is journaled, whoever sent it."""


def consumer_name(shard: int, shards: int) -> str:
    """The durable consumer of journal shard `shard` of `shards`; a single journal keeps the name it always had."""
    return CONSUMER if shards == 1 else f"{CONSUMER}-{shard}of{shards}"


async def journal_backlog(bus: Bus, shards: int) -> list[int | None]:
    """For each journal shard, how many messages of the stream it has not journaled yet (None: its consumer does
    not exist, the shard never started)."""
    return [await bus.unacknowledged(consumer_name(shard, shards)) for shard in range(shards)]


_Row = tuple[Delivery, Incoming]


class _Ask(msgspec.Struct):
    """A question on `<prefix>.svc.journal`: answer once everything up to `until` is journaled."""

    until: int = 0


class JournalService:
    """Runs until `stop()`, then journals what the stream holds up to that moment."""

    def __init__(
        self,
        bus: Bus,
        path: str | Path,
        *,
        batch_limit: int = BATCH_LIMIT,
        batch_gather_s: float = BATCH_GATHER_S,
        on_completed: Callable[[list[str]], None] | None = None,
        completers: Collection[str] | None = None,
        shard: int = 0,
        shards: int = 1,
        trim_after_s: float = 0.0,
        trim_every_s: float = TRIM_EVERY_S,
    ) -> None:
        if not 0 <= shard < shards:
            raise JournalError(f"journal shard {shard} of {shards}: a shard is numbered 0 to {shards - 1}")
        self.bus = bus
        self.completers = None if completers is None else {RUNNER, *completers}
        """Who may complete an episode (the runner and `completers`); None takes every completion."""
        self.shard = shard
        self.shards = shards
        self.path = Path(path) if shards == 1 else shard_path(Path(path), shard)
        """The file it writes: `path`, or its shard's file in the set at `path`."""
        self._set = None if shards == 1 else Path(path)
        self._named = str((self._set or self.path).resolve())
        """The journal as its answers name it: the file, or the set's folder, by its absolute path."""
        self.batch_limit = batch_limit
        self.batch_gather_s = batch_gather_s
        self.on_completed = on_completed
        """Told the episodes whose completion a batch just committed; must not block."""
        self.last_seq = 0
        self.rows_written = 0
        self.stuck = ""
        """Why the file cannot be written now; "" while it can."""
        self._ready = anyio.Event()
        self._stopping = anyio.Event()
        self._changed = anyio.Event()
        self._waiting: list[tuple[int, Message]] = []
        self._filtered = bool(bus.subjects.shard_journaled(shard, shards))
        """Whether its consumer is filtered to its partitions: its deliveries then skip the others' sequences."""
        self._consumer: Consumer | None = None
        self._last_delivery = 0
        """The consumer sequence of the last delivery seen since the consumer was opened (`_in_order`)."""
        self._wanted = 0
        """The furthest stream sequence waited for in this process (`wait_for`, `_catch_up`)."""
        self._hurry = anyio.Event()
        """Set while someone waits for a sequence the file does not hold yet: batches are then not gathered."""
        self._tasks: TaskGroup | None = None
        self._asking_again = False
        self._reaching = False
        self._reach_asked = False
        """Whether a question came since the running look at the stream's end began (`_reach_soon`)."""
        self._kept = EpisodesKept(trim_after_s) if trim_after_s > 0 and self._trims(trim_after_s) else None
        """The episodes the stream must keep; None where the stream is never trimmed."""
        self.trim_every_s = trim_every_s
        self.trimmed_below = 0
        """The stream sequence below which this service trimmed its episodes' messages from the stream."""
        self.letters_trimmed_below = 0
        """The stream sequence below which this service trimmed the dead letters from the stream (shard 0 only)."""
        self._last_row = 0
        """The stream sequence of the last row the file holds: where a journal started again reads from."""

    def _trims(self, trim_after_s: float) -> bool:
        """Whether this service may trim the stream: not as a shard of a set whose subjects are not partitioned
        (more partitions than a system may have), where every shard's episodes share its subjects and a trim of its
        own would take the others' episodes, in flight or not journaled yet, with them."""
        if self.shards == 1 or self._filtered:
            return True
        log.warning(
            "%s: the stream is not trimmed (trim_after_s %g): the system's subjects are not partitioned among the %d"
            " journal shards, so each shard's trim would take the others' episodes",
            self.path,
            trim_after_s,
            self.shards,
        )
        return False

    async def wait_ready(self) -> None:
        await self._ready.wait()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Copy until stopped, then catch up; JournalError if the file refused what the stream held by then."""
        if self._set is not None:
            create_set(self._set, self.shards)
        journal = Journal.open(self.path)
        try:
            stream = await self.bus.stream_incarnation()
            self.last_seq = self._last_row = journal.last_seq(stream)
            if self._kept is not None:
                await self._keep_journaled(journal, stream, self._kept)
            sub = await self.bus.subscribe(self.bus.subjects.svc(JOURNAL_SERVICE), self._on_ask)
            try:
                async with anyio.create_task_group() as self._tasks:
                    self._tasks.start_soon(self._copy, journal, stream)
                    if self._kept is not None:
                        self._tasks.start_soon(self._trim, self._kept)
                    await self._stopping.wait()
                    target = await self._catch_up()
                    self._tasks.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await self._answer(everyone=True)
                    await sub.unsubscribe()
        finally:
            journal.close()
        if self.last_seq < target:
            raise JournalError(
                f"stopped behind the stream, at sequence {self.last_seq} of {target}: {self.stuck}; the stream"
                " keeps the rest, which the next start journals"
            )

    async def _copy(self, journal: Journal, stream: str) -> None:
        """Copy batches; when the file refuses one, hold it until it is written, then resume from the file."""
        while True:
            consumer = self._consumer = await self._open()
            self._last_delivery = 0
            self._ready.set()
            await self._reach_stream()  # reopened after a hold with nothing of its own left, no batch will ask
            try:
                refused = await self._copy_batches(journal, stream, consumer)
            finally:
                with anyio.CancelScope(shield=True):
                    await consumer.close()
            if refused is not None:
                await self._hold(journal, *refused)

    async def _open(self) -> Consumer:
        """A fresh consumer from the file's last sequence.

        Once running, a refusal to open it for now is waited out (`asked_again`; a refused credential is raised);
        at start it is raised, so that the service fails with the reason.
        """

        async def fresh() -> Consumer:
            # A single journal takes no subject filter: the stream holds only journaled subjects, and a filter
            # of several subjects costs nats-server several times the work per message. A shard's filter names
            # its partitions, where the subjects are partitioned (`Subjects.shard_journaled`).
            return await self.bus.consumer(
                consumer_name(self.shard, self.shards),
                self.bus.subjects.shard_journaled(self.shard, self.shards),
                start=self.last_seq + 1,
                ack_all=True,
                max_ack_pending=MAX_ACK_PENDING,
                replace=True,
                heartbeat=True,
            )

        return await (asked_again(fresh) if self._ready.is_set() else fresh())

    async def _copy_batches(
        self, journal: Journal, stream: str, consumer: Consumer
    ) -> tuple[list[_Row], int, JournalStorageError] | None:
        """Copy until the storage refuses a batch, or deliveries are lost on the way (then None).

        A refused batch comes back with its last sequence and the refusal.
        """
        while True:
            try:
                arrived = await consumer.batch(self.batch_limit, self.batch_gather_s, self._hurry_while_awaited())
            except DeliveriesLostError as exc:  # an idle heartbeat said so: nothing later came to tell
                log.warning("%s; reading the stream again from %d", exc, self.last_seq + 1)
                return None
            batch, lost = self._in_order(arrived)
            rows: list[_Row] = []
            for delivery in batch:
                if self.shards > 1 and not self._mine(delivery):
                    continue
                env = await self.bus.decode_or_dead_letter(delivery)
                if env is not None and (refusal := self._refused(env)):
                    await self.bus.dead_letter(delivery, refusal)
                elif env is not None:
                    row = Incoming(
                        stream=stream,
                        stream_seq=delivery.stream_seq,
                        subject=delivery.subject,
                        envelope=env,
                        body=body_bytes(delivery.data),
                    )
                    rows.append((delivery, row))
            if batch:
                try:
                    if rows:  # none, when a shard's batch held only other shards' messages
                        await self._append(journal, rows)
                except JournalStorageError as exc:
                    return rows, batch[-1].stream_seq, exc
                await consumer.ack(batch[-1])
                await self._advance(batch[-1].stream_seq)
                await self._reach_stream()
                if self.on_completed is not None:
                    finished = [
                        row.envelope.episode for _, row in rows if isinstance(row.envelope.body, EpisodeCompleted)
                    ]
                    if finished:
                        self.on_completed(finished)
            if lost:
                log.warning(
                    "%s: stream sequences %d to %d were delivered but never arrived (a server or route was lost);"
                    " reading the stream again from %d",
                    self.path,
                    self.last_seq + 1,
                    lost - 1,
                    self.last_seq + 1,
                )
                return None

    def _episode_messages(self, messages: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int]]:
        """(episode, stream sequence) of those of `messages` (subject, stream sequence) that name an episode."""
        episode_in = self.bus.subjects.episode_in
        for subject, seq in messages:
            if episode := episode_in(subject):
                yield episode, seq

    async def _keep_journaled(self, journal: Journal, stream: str, kept: EpisodesKept) -> None:
        """Count as just seen every episode of the rows the stream still holds: a journal started again cannot
        tell which of them are settled, so it keeps them all for `trim_after_s` more."""
        first = await self.bus.first_stored(self.bus.subjects.shard_episodes(self.shard, self.shards))
        if first:
            since = await anyio.to_thread.run_sync(journal.journaled_since, stream, first)
            kept.seen(self._episode_messages(since), anyio.current_time())

    async def _trim(self, kept: EpisodesKept) -> None:
        """Every `trim_every_s`, remove from the stream the messages this service journaled of settled episodes
        (`EpisodesKept`), and, as shard 0, the dead letters every shard journaled; a trim refused now (no leader, a
        lost connection) is tried again next time.

        Nothing reads a dead letter from the stream but the journal, so none is kept once journaled: a flood of
        them costs the stream only what the journal has not written yet. Their subject names no episode, and each
        goes to the shard of the episode its envelope names (`dlq` for the runtime's letters, any for a forged
        one; bytes no shard can read are shard 0's to dead-letter), so shard 0 trims them, below what every shard
        has passed.
        """
        subjects = self.bus.subjects.shard_episodes(self.shard, self.shards)
        letters = [self.bus.subjects.dlq]
        while True:
            await anyio.sleep(self.trim_every_s)
            written = self._written()
            below = kept.floor(anyio.current_time(), written)
            if below > self.trimmed_below and await self._trimmed(subjects, below):
                self.trimmed_below = below
                log.debug("%s: trimmed the stream below sequence %d (%d episodes kept)", self.path, below, len(kept))
            if self.shard != 0:
                continue
            try:
                below = await self._passed_by_every_shard(written)
            except BusError as exc:
                log.warning("%s: cannot tell how far the journal shards are now: %s", self.path, exc)
                continue
            if below > self.letters_trimmed_below and await self._trimmed(letters, below):
                self.letters_trimmed_below = below
                log.debug("%s: trimmed the dead letters below sequence %d", self.path, below)

    def _written(self) -> int:
        """The last stream sequence the stream may let go of: for a consumer of the whole stream, the file's last
        row, since a journal started again reads from there and takes a sequence missing after it for one deleted
        unjournaled (a refused message's, whose letter comes later); a filtered shard tells losses by its
        consumer's sequence, and has journaled its own up to `last_seq`."""
        return self.last_seq if self._filtered else self._last_row

    async def _passed_by_every_shard(self, written: int) -> int:
        """The stream sequence below which every journal shard has journaled, or passed over as another's, every
        dead letter: this one's `written`, and each other's acknowledgement floor (a shard acknowledges only what
        its file holds, and is delivered every dead letter), none for a shard that never started."""
        floors = [written]
        for k in range(1, self.shards):
            floors.append(await self.bus.ack_floor(consumer_name(k, self.shards)) or 0)
        return min(floors) + 1

    async def _trimmed(self, subjects: list[str], below: int) -> bool:
        """Trim `subjects` below sequence `below`; False, with a warning, when the stream refuses it now."""
        try:
            await self.bus.trim_stream(subjects, below)
        except BusError as exc:
            log.warning("%s: cannot trim the stream below sequence %d now: %s", self.path, below, exc)
            return False
        return True

    def _mine(self, delivery: Delivery) -> bool:
        """Whether the message belongs to this shard: every row of a set lies in its episode's shard.

        Filtered to its partitions, a shard takes whatever they deliver: a message forged onto another partition
        than its episode's is the shard's to dead-letter, since no other shard is delivered it.
        """
        episode = self.bus.subjects.episode_in(delivery.subject)
        if episode and self._filtered:
            return True
        if not episode:  # a control or a dead letter: rare enough to decode for its episode
            try:
                episode = decode_envelope(delivery.data).episode
            except DecodeError:
                return self.shard == 0  # what no shard can read, shard 0 dead-letters
        return episode_shard(episode, self.shards) == self.shard

    def _refused(self, env: Envelope) -> str:
        """Why `env` is not journaled as it is ("" when it is): a completion from a sender that may not complete."""
        if self.completers is None or not isinstance(env.body, EpisodeCompleted) or env.sender in self.completers:
            return ""
        allowed = ", ".join(sorted(self.completers))
        return f"completion refused: {env.sender!r} may not complete an episode (only {allowed}) - at `$.sender`"

    def _in_order(self, batch: list[Delivery]) -> tuple[list[Delivery], int]:
        """The deliveries that continue the file in stream order, and the sequence that skipped ahead (0 if none).

        Deliveries of sequences already journaled (delivered again) are left out.
        """
        expected = self.last_seq + 1
        taken: list[Delivery] = []
        for delivery in batch:
            if self._filtered:  # the other shards' sequences are not delivered: a delivery lost skips its own
                if delivery.consumer_seq > self._last_delivery + 1:
                    return taken, delivery.stream_seq
                self._last_delivery = delivery.consumer_seq
                if delivery.stream_seq >= expected:
                    taken.append(delivery)
                    expected = delivery.stream_seq + 1
                continue
            if delivery.stream_seq < expected:
                continue
            if delivery.stream_seq > expected:
                if delivery.consumer_seq != 1:
                    return taken, delivery.stream_seq
                log.error(
                    "%s: the stream no longer holds sequences %d to %d (deleted); the journal goes on from %d",
                    self.path,
                    expected,
                    delivery.stream_seq - 1,
                    delivery.stream_seq,
                )
            taken.append(delivery)
            expected = delivery.stream_seq + 1
        return taken, 0

    async def _append(self, journal: Journal, rows: list[_Row]) -> None:
        """Append `rows` in one transaction; if a row cannot be stored, dead-letter it and store the rest. Their
        episodes are then seen by what decides what the stream keeps, whichever way they were written (a batch held
        by a full disk too)."""
        try:
            self.rows_written += await anyio.to_thread.run_sync(journal.append, [row for _, row in rows])
            self._last_row = rows[-1][1].stream_seq
        except JournalStorageError:
            raise
        except Exception:  # noqa: BLE001 - a row SQLite refuses must not stop the journal: find it below
            log.warning("%s: a batch was refused; storing its %d rows one by one", self.path, len(rows))
            for delivery, row in rows:
                try:
                    self.rows_written += await anyio.to_thread.run_sync(journal.append, [row])
                    self._last_row = row.stream_seq
                except JournalStorageError:
                    raise
                except Exception as exc:  # noqa: BLE001 - any refusal of this row
                    await self.bus.dead_letter(delivery, f"the journal cannot store it: {exc}")
        if self._kept is not None:
            messages = ((row.subject, row.stream_seq) for _, row in rows)
            self._kept.seen(self._episode_messages(messages), anyio.current_time())

    async def _hold(self, journal: Journal, rows: list[_Row], seq: int, refusal: JournalStorageError) -> None:
        """Write the refused batch again, with backoff, until it is written; the stream keeps everything meanwhile."""
        log.error(
            "%s. Journal holds at stream sequence %d; nothing is lost (the stream keeps every message), "
            "new episodes are refused, and the journal catches up by itself once the file can be written",
            refusal,
            self.last_seq,
        )
        await self._set_stuck(str(refusal))

        async def still_refused(exc: Exception) -> None:
            await self._set_stuck(str(exc))

        await asked_again(
            functools.partial(self._append, journal, rows),
            retried=JournalStorageError,
            failed=still_refused,
            wait_first=True,  # the write was refused just now
        )
        log.warning("%s: written again from stream sequence %d; catching up", self.path, self.last_seq + 1)
        await self._set_stuck("")
        await self._advance(seq)

    async def _catch_up(self) -> int:
        """Wait until everything the stream held when asked to stop is in the file, or the file refuses it.

        Returns the stream's last sequence at that moment.
        """
        last = (await self.bus.stream_state()).last_seq
        await self._want(last)
        await self._until(lambda: self.last_seq >= last or bool(self.stuck))
        return last

    async def _reach_stream(self) -> None:
        """A shard filtered to its partitions is told no sequence of the others': once its consumer has nothing
        left to deliver and nothing unacknowledged, it holds everything of its own the stream held before, so it
        has reached the stream's last sequence. Asked only while someone waits for a sequence it has not reached.
        """
        if not self._filtered or self._consumer is None or self.stuck:  # a single journal: after every batch
            return
        if self._awaited() <= self.last_seq:
            return
        try:
            last = (await self.bus.stream_state()).last_seq  # first: what the consumer then says covers it
            if last > self.last_seq:
                if await self._consumer.settled():
                    await self._advance(last)
                else:
                    self._ask_again()
        except BusError as exc:
            log.debug("%s: cannot tell whether it reached the stream's end now: %s", self.path, exc)
            self._ask_again()

    def _awaited(self) -> int:
        """The furthest stream sequence someone waits for: asked for, or wanted in this process."""
        return max([self._wanted, *(until for until, _ in self._waiting)])

    def _hurry_while_awaited(self) -> anyio.Event:
        """The event that cuts a batch's gathering short: set now if someone waits for what the file lacks."""
        awaited = self._awaited() > self.last_seq
        if self._hurry.is_set() and not awaited:
            self._hurry = anyio.Event()
        elif awaited:
            self._hurry.set()
        return self._hurry

    def _ask_again(self) -> None:
        """Ask `_reach_stream` again in `REACH_RETRY_S`, one such question at a time."""
        if self._tasks is not None and not self._asking_again:
            self._asking_again = True
            self._tasks.start_soon(self._reach_later)

    async def _reach_later(self) -> None:
        await anyio.sleep(REACH_RETRY_S)
        self._asking_again = False
        await self._reach_stream()

    async def wait_for(self, seq: int) -> None:
        """Wait until the file holds everything up to `seq`, however long it refuses writes meanwhile."""
        await self._want(seq)
        await self._until(lambda: self.last_seq >= seq)

    async def _want(self, seq: int) -> None:
        self._wanted = max(self._wanted, seq)
        self._hurry_while_awaited()
        await self._reach_stream()

    async def _until(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._changed.wait()

    async def _advance(self, seq: int) -> None:
        self.last_seq = max(self.last_seq, seq)  # a shard's reach of the stream's end may race its next batch
        await self._notify()

    async def _set_stuck(self, reason: str) -> None:
        """Change the state, and tell it (`<prefix>.svc.journal.<shard's user>.state`: `up` tells its user)."""
        if reason != self.stuck:
            self.stuck = reason
            await self._notify()
            state = msgspec.json.encode(
                {"stuck": self.stuck, "last_seq": self.last_seq, "shard": self.shard, "shards": self.shards}
            )
            try:
                await tell(self.bus, JOURNAL_SERVICE, JOURNAL_STATE, state)
            except BusError:
                pass  # nobody hears it now; whoever asks gets the same answer

    async def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
        await self._answer()

    async def _on_ask(self, msg: Message) -> None:
        """Answer `{"until": seq}` once the journal holds everything up to `seq`, or at once if it is stuck.

        The answer is `{"last_seq", "rows", "stuck"}`; `{}` asks for it right away.
        """
        ask = decode_notice(msg.data or b"{}", _Ask, subject=msg.subject)
        until = ask.until if ask is not None else 0  # what is not a question is answered at once
        self._waiting.append((until, msg))
        if len(self._waiting) > MAX_WAITING:
            _, oldest = self._waiting.pop(0)
            await self._respond([oldest])
        self._hurry_while_awaited()
        await self._answer()
        self._reach_soon()

    def _reach_soon(self) -> None:
        """`_reach_stream` in a task of its own, again while questions came during the last look: a burst of
        questions costs a look at the stream per round trip, not one each."""
        self._reach_asked = True
        if self._tasks is not None and not self._reaching:
            self._reaching = True
            self._tasks.start_soon(self._reach_while_asked)

    async def _reach_while_asked(self) -> None:
        try:
            while self._reach_asked:
                self._reach_asked = False
                await self._reach_stream()
        finally:
            self._reaching = False

    async def _answer(self, *, everyone: bool = False) -> None:
        """Answer the questions that can be answered now (all of them when stopping)."""
        done = everyone or bool(self.stuck)
        answered: list[Message] = []
        waiting: list[tuple[int, Message]] = []
        for until, msg in self._waiting:
            if done or until <= self.last_seq:
                answered.append(msg)
            else:
                waiting.append((until, msg))
        self._waiting = waiting
        await self._respond(answered)

    async def _respond(self, asked: list[Message]) -> None:
        """Tell each of `asked` the journal's state now."""
        if not asked:
            return
        reply = msgspec.json.encode(
            {
                "last_seq": self.last_seq,
                "rows": self.rows_written,
                "stuck": self.stuck,
                "shard": self.shard,
                "shards": self.shards,
                "journal": self._named,
            }
        )
        for msg in asked:
            try:
                await msg.respond(reply)
            except BusError:
                pass  # the connection is gone, or nobody waits for the answer; whoever asked asks again
