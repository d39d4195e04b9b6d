"""The stream every journaled subject goes to: made, brought up to date, and asked how it stands.

The stream records into how many partitions its subjects divide the episodes, so that a process with another
layout is refused rather than publishing where no shard reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import nats.js.errors
from nats.js import JetStreamContext, api

from faultline._errors import BusError
from faultline.bus._acks import MSG_ID
from faultline.bus._refusals import Refusals
from faultline.bus._settings import BusSettings
from faultline.core import Subjects

PARTITIONS_KEY = "faultline_partitions"
"""The stream's metadata key that records into how many partitions its subjects divide the episodes."""


@dataclass(frozen=True, slots=True)
class StreamState:
    """How many messages the stream holds, the sequences of the first and the last one stored, and its bytes."""

    messages: int
    last_seq: int
    first_seq: int = 0
    bytes: int = 0


class Stream:
    """The system's stream as this connection sees it (`Bus.ensure_stream`, `Bus.stream_state` ...)."""

    def __init__(self, js: JetStreamContext, subjects: Subjects, settings: BusSettings, refusals: Refusals) -> None:
        self._js = js
        self._subjects = subjects
        self._settings = settings
        self._refusals = refusals

    async def ensure(self) -> api.StreamInfo:
        subjects = self._subjects
        partitions = subjects.partitions
        config = api.StreamConfig(
            name=subjects.stream,
            subjects=subjects.journaled,
            storage=api.StorageType.FILE,
            retention=api.RetentionPolicy.LIMITS,
            duplicate_window=self._settings.duplicate_window_s,
            num_replicas=self._settings.replicas,
            metadata={PARTITIONS_KEY: str(partitions)},
        )
        with self._refusals.asking_jetstream(f"setting up stream {subjects.stream}"):
            try:
                info = await self._js.stream_info(subjects.stream)
            except nats.js.errors.NotFoundError:
                try:
                    return await self._js.add_stream(config)
                except nats.js.errors.BadRequestError:
                    info = await self._js.stream_info(subjects.stream)  # created concurrently
            recorded = _partitions(info)
            if recorded != partitions and info.state.messages:
                raise BusError(
                    self._other_layout(recorded, f"holds {info.state.messages} messages whose subjects it divides")
                )
            if recorded != partitions or sorted(info.config.subjects or []) != sorted(config.subjects or []):
                return await self._js.update_stream(config)
            return info

    async def check_layout(self) -> None:
        recorded = _partitions(await self._info())
        if recorded != self._subjects.partitions:
            raise BusError(self._other_layout(recorded, "divides its subjects"))

    def _other_layout(self, recorded: int, what: str) -> str:
        return (
            f"stream {self._subjects.stream} {what} into {recorded} partition(s), and this process divides them into"
            f" {self._subjects.partitions} (the least common multiple of [journal] shards and every [workers.*] count):"
            " run it with the system's own configuration, or start the system on a new store"
        )

    async def incarnation(self) -> str:
        info = await self._info()
        created = getattr(info, "created", None) or ""
        return f"{self._subjects.stream}@{created}"

    async def trim(self, subjects: list[str], below: int) -> None:
        """Remove the messages on `subjects` (each a filter) whose sequence is below `below`."""
        with self._refusals.asking_jetstream(f"trimming stream {self._subjects.stream} below sequence {below}"):
            for subject in subjects:
                await self._js.purge_stream(self._subjects.stream, seq=below, subject=subject)

    async def first_on(self, subjects: list[str]) -> int:
        """The sequence of the first message the stream holds on any of `subjects` (filters); 0 when none."""
        firsts = []
        with self._refusals.asking_jetstream(f"asking stream {self._subjects.stream} for its first messages"):
            for subject in subjects:
                try:
                    first = await self._js.get_msg(self._subjects.stream, seq=1, subject=subject, next=True)
                except nats.js.errors.NotFoundError:
                    continue
                firsts.append(first.seq or 0)
        return min(firsts, default=0)

    async def last_msg_id(self, subject: str) -> str:
        """The message id the last message stored on `subject` was published with; "" where none is stored."""
        with self._refusals.asking_jetstream(
            f"asking stream {self._subjects.stream} for its last message on {subject}"
        ):
            try:
                last = await self._js.get_last_msg(self._subjects.stream, subject)
            except nats.js.errors.NotFoundError:
                return ""
        return str((last.headers or {}).get(MSG_ID, ""))

    async def last_on(self, subjects: list[str]) -> int:
        """The sequence of the last message the stream holds on any of `subjects` (filters); 0 when none."""
        lasts = [0]
        with self._refusals.asking_jetstream(f"asking stream {self._subjects.stream} for its last messages"):
            for subject in subjects:
                try:
                    last = await self._js.get_last_msg(self._subjects.stream, subject)
                except nats.js.errors.NotFoundError:
                    continue
                lasts.append(last.seq or 0)
        return max(lasts)

    async def state(self) -> StreamState:
        info = await self._info()
        state = info.state
        return StreamState(
            messages=state.messages, last_seq=state.last_seq, first_seq=state.first_seq, bytes=state.bytes
        )

    async def _info(self) -> api.StreamInfo:
        with self._refusals.asking_jetstream(f"asking for the state of stream {self._subjects.stream}"):
            return await self._js.stream_info(self._subjects.stream)


def _partitions(info: api.StreamInfo) -> int:
    """The partitions a stream's metadata records; a stream made before they were recorded has one."""
    return int((info.config.metadata or {}).get(PARTITIONS_KEY, "1"))
