"""A seeded nemesis: a schedule of process, network, disk and clock faults drawn from one seed, applied to a
live clustered system.

The schedule is a value (`Schedule`, printable and JSON): the same seed and episode count draw the same
faults, so a failing run is rerun exactly with its seed. Faults are applied one after another, each
once enough episodes have completed; the next waits until every process is back and the stream's
three replicas are current, so no fault ever takes the stream's majority (one node cut or stopped at a
time), and until an episode has completed since the one before ended, so that each fault's time to
recover is its own, not lengthened by the next. A schedule drawn with `overlap` applies some faults while
the one before still lasts; two faults that would take two nodes, or act on the same links, disk or
process, still wait for each other (`holds`). A kind is a member of `Kind` with its way to apply and undo
it in `Nemesis._apply`. Network faults act on the links of the cluster's network (`bench._proxy`): every
route between nodes and every process's connection to a node goes through one. Disk faults act on the
journal's own disk (`bench._disk`), clock steps on the wall clock of a process started through
`bench._wallclock`.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import anyio
import msgspec

from bench import _wallclock
from bench._cluster import NODES, Cluster, replicas_current, stream_leader
from bench._common import fail_after
from bench._disk import Disk
from faultline import BusError, NoResponderError, ReplyTimeoutError
from faultline.runtime import Supervisor, ask_journal

EPISODES_PER_FAULT = 8
"""One fault is drawn for this many episodes of a schedule."""
DELAY_S = (0.0, 1.0)
"""The wall time a fault waits, once its episode count is reached, before it is applied."""
RESTART_TIMEOUT_S = 60.0
"""How long a killed worker or journal may take to serve again under the supervisor."""
POLL_S = 0.2
LEADER = "leader"
"""The target that is whichever node leads the stream when the fault is applied."""
DISK = "disk"
"""The target of the disk kinds: the journal's own disk."""
JOURNAL_ASK_S = 2.0


class Kind(StrEnum):
    KILL = "kill"
    """SIGKILL. The supervisor restarts a worker or the journal; the nemesis restarts a node after `duration_s`."""
    PAUSE = "pause"
    """SIGSTOP, then SIGCONT after `duration_s`: a process that is alive, holds its sockets, and answers nothing."""
    PARTITION = "partition"
    """Every link from or to the target dropped and refused for `duration_s`, then healed: a node cut from the
    other two and from every process (the leader included), or a process cut from all three nodes."""
    DELAY = "delay"
    """Every chunk through the target's links held a time drawn in [0, `latency_s`], for `duration_s`."""
    DISK_FULL = "disk_full"
    """The journal's disk filled to the last byte (the kernel's ENOSPC for every write), freed after
    `duration_s`."""
    SLOW_DISK = "slow_disk"
    """The journal's disk held to `iops` reads and `iops` writes a second, for `duration_s`."""
    CLOCK = "clock"
    """The target process's wall clock stepped by `offset_s` (forwards or back), and stepped back to the
    system's after `duration_s`; its monotonic clocks go on."""
    ONE_WAY = "one_way"
    """The bytes headed to the target (`direction` "in") or from it ("out") on every one of its links held
    for `duration_s`, the connections left open and the other way flowing, then let through in order: a
    firewall rule dropping one direction, where TCP delivers what it held once the path returns, unless
    a side gave up on the connection first (a client's pings unanswered)."""
    BRIDGE = "bridge"
    """The routes between the target node and one other (`peer`) dropped and refused both ways for
    `duration_s`, then healed, while both still reach the third node and every process reaches all three: a
    partial partition, where each of the two sees a majority and the two disagree on who is reachable.
    NATS routes do not relay, so what one of the two sends for the other's clients is lost meanwhile."""
    BLACK_HOLE = "black_hole"
    """Every byte through the target's links held both ways for `duration_s`, the connections left open and
    new ones taken and left silent, then let through in order: packets dropped with no reset and no refusal,
    which a peer notices only by its own timeouts (unanswered pings, silent consumers), and TCP delivering
    what it held once the path returns, to whoever did not give up first."""


KINDS = tuple(Kind)
PROCESS_KINDS = (Kind.KILL, Kind.PAUSE)
"""The kinds of the first schedules: a seed drawn with only these draws the schedule it drew before the
network kinds were added."""
NETWORK_KINDS = (Kind.PARTITION, Kind.DELAY, Kind.ONE_WAY, Kind.BRIDGE, Kind.BLACK_HOLE)
"""The kinds that need the cluster's network (`Cluster.network`)."""
CUTTING_KINDS = (Kind.PARTITION, Kind.ONE_WAY, Kind.BRIDGE, Kind.BLACK_HOLE)
"""The network kinds that cut links, as opposed to slowing them."""
DISK_KINDS = (Kind.DISK_FULL, Kind.SLOW_DISK)
"""The kinds that need the journal on a disk of its own (`bench._disk`)."""
NETWORK_ERA_KINDS = (*PROCESS_KINDS, Kind.PARTITION, Kind.DELAY)
"""The kinds before disks and clocks: a seed drawn with these draws the schedule it drew then."""
CLOCK_ERA_KINDS = (*NETWORK_ERA_KINDS, *DISK_KINDS, Kind.CLOCK)
"""The kinds before one-way partitions: a seed drawn with these draws the schedule it drew then."""
ONE_WAY_ERA_KINDS = (*CLOCK_ERA_KINDS, Kind.ONE_WAY)
"""The kinds before bridges and black holes: a seed drawn with these draws the schedule it drew then."""
DIRECTIONS = ("in", "out")
"""What a one-way partition holds: the bytes headed to its target, or those it sends."""
DURATIONS_S = {
    Kind.KILL: (0.5, 3.0),
    Kind.PAUSE: (1.0, 6.0),
    Kind.PARTITION: (1.0, 8.0),
    Kind.DELAY: (2.0, 8.0),
    Kind.DISK_FULL: (1.0, 8.0),
    Kind.SLOW_DISK: (2.0, 10.0),
    Kind.CLOCK: (2.0, 10.0),
    Kind.ONE_WAY: (1.0, 8.0),
    Kind.BRIDGE: (1.0, 8.0),
    Kind.BLACK_HOLE: (1.0, 8.0),
}
"""The range each kind's duration is drawn from: how long a node stays down, a process stopped, a link cut
or slowed, the disk full or slow, or a clock stepped. A killed worker or journal has none: the supervisor
restarts it when its backoff says."""
LATENCIES_S = (0.05, 1.0)
"""The range a delay's `latency_s` is drawn from: up to a second, as long as a client's ping interval."""
IOPS = (2, 20)
"""The range a slow disk's `iops` is drawn from: slower than a seeking hard disk (about 100)."""
CLOCK_STEPS_S = (1.0, 3600.0)
"""The range of a clock step's size, forwards or back: a second to the hour of a host's clock set right."""
WITH_PREVIOUS = 0.5
"""With `overlap`, the chance that a fault (but the first) begins while the one before may still last."""


class Fault(msgspec.Struct, frozen=True, kw_only=True):
    kind: Kind
    target: str
    """A process of the supervisor (`journal`, `worker-main-0`), a node (`n1`), or `leader`."""
    after_episodes: int
    """Applied once the runner has completed this many episodes..."""
    delay_s: float
    """...and this much wall time has passed since."""
    duration_s: float
    latency_s: float = 0.0
    """A delay's most a chunk is held."""
    iops: int = 0
    """A slow disk's reads, and its writes, a second."""
    offset_s: float = 0.0
    """A clock's step: seconds added to the target's wall clock (negative: back)."""
    direction: str = ""
    """A one-way partition's: "in" holds what goes to the target, "out" what it sends."""
    peer: str = ""
    """A bridge's: the node whose routes to the target are cut."""
    with_previous: bool = False
    """Begun `delay_s` after the fault before it began, while that one may still last, instead of at an
    episode count (schedules drawn with `overlap`)."""

    def describe(self) -> str:
        held = f" up to {self.latency_s:g}s a chunk" if self.latency_s else ""
        held += f" to {self.iops} IO/s" if self.iops else ""
        held += f" stepped {self.offset_s:+g}s" if self.offset_s else ""
        held += f" {self.direction}" if self.direction else ""
        held += f" from {self.peer}" if self.peer else ""
        lasting = f" for {self.duration_s:g}s" if self.duration_s else ""
        when = "while the one before lasts" if self.with_previous else f"after {self.after_episodes} episodes"
        return f"{self.kind} {self.target}{held}{lasting} {when} + {self.delay_s:g}s"


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    seed: int
    episodes: int
    faults: tuple[Fault, ...]
    overlap: bool = False
    """Faults may begin while others last (`Fault.with_previous`); else each is over before the next."""

    def describe(self) -> str:
        head = f"seed {self.seed}: {self.episodes} episodes, {len(self.faults)} faults"
        head += ", overlapping" if self.overlap else ""
        return "\n".join([head, *(f"  {i}. {fault.describe()}" for i, fault in enumerate(self.faults, 1))])


def draw_schedule(
    seed: int, episodes: int, processes: Sequence[str], kinds: Sequence[Kind] = KINDS, *, overlap: bool = False
) -> Schedule:
    """The schedule of `seed`: one fault per EPISODES_PER_FAULT episodes, each at a count drawn in its own
    slice of the run's first three quarters (so that later faults still meet running episodes), of a kind,
    target, delay and duration (and a delay's latency, a slow disk's IO/s, a clock's step, a one-way partition's
    direction, a bridge's peer) drawn from
    `random.Random(seed)`; what a kind draws past its duration is drawn last, so a seed drawn with the kinds
    of before draws what it drew then. With `overlap`, each fault but the first may begin while the one
    before lasts, drawn from a generator of its own: the faults are those of the seed without overlap."""
    rng, overlapping = random.Random(seed), random.Random(f"{seed}:overlap")
    count = max(1, episodes // EPISODES_PER_FAULT)
    slot = max(1, episodes * 3 // 4) / count
    faults = []
    for i in range(count):
        after = 1 + int(i * slot) + rng.randrange(max(1, int(slot)))
        kind = rng.choice(list(kinds))
        target = rng.choice(_targets(kind, processes))
        delay_s, duration_s = round(rng.uniform(*DELAY_S), 2), round(rng.uniform(*DURATIONS_S[kind]), 2)
        if kind is Kind.KILL and target in processes:
            duration_s = 0.0  # the supervisor decides when it comes back
        latency_s = round(rng.uniform(*LATENCIES_S), 2) if kind is Kind.DELAY else 0.0
        iops = rng.randint(*IOPS) if kind is Kind.SLOW_DISK else 0
        offset_s = rng.choice((-1, 1)) * round(rng.uniform(*CLOCK_STEPS_S), 1) if kind is Kind.CLOCK else 0.0
        direction = rng.choice(DIRECTIONS) if kind is Kind.ONE_WAY else ""
        peer = rng.choice([node for node in NODES if node != target]) if kind is Kind.BRIDGE else ""
        with_previous = overlap and i > 0 and overlapping.random() < WITH_PREVIOUS
        faults.append(
            Fault(
                kind=kind,
                target=target,
                after_episodes=after,
                delay_s=delay_s,
                duration_s=duration_s,
                latency_s=latency_s,
                iops=iops,
                offset_s=offset_s,
                direction=direction,
                peer=peer,
                with_previous=with_previous,
            )
        )
    return Schedule(seed=seed, episodes=episodes, faults=tuple(faults), overlap=overlap)


def _targets(kind: Kind, processes: Sequence[str]) -> list[str]:
    """What a fault of `kind` may hit: the journal's disk, a process's clock, a node's routes (by name: its
    peer is drawn among the others), or any process or node."""
    if kind in DISK_KINDS:
        return [DISK]
    if kind is Kind.CLOCK:
        return list(processes)
    if kind is Kind.BRIDGE:
        return list(NODES)
    return [*processes, *NODES, LEADER]


def holds(fault: Fault) -> set[str]:
    """What `fault` holds while it lasts, and overlapping faults take in turn: the stream's majority (a node
    stopped, down or cut off: one at a time), the network's links (a link has one state, and a partition of a
    node and one of a process share links), a process's signals, its clock, or the disk's space or speed."""
    if fault.kind in NETWORK_KINDS:
        cuts = fault.kind in CUTTING_KINDS
        return {"links", "nodes"} if cuts and _is_node(fault.target) else {"links"}
    if fault.kind in PROCESS_KINDS:
        return {"nodes"} if _is_node(fault.target) else {f"signals {fault.target}"}
    if fault.kind is Kind.CLOCK:
        return {f"clock {fault.target}"}
    return {f"disk {fault.kind}"}


def _is_node(target: str) -> bool:
    return target in NODES or target == LEADER


class Applied(msgspec.Struct, kw_only=True):
    """A fault as it was applied: times in seconds since the run began."""

    fault: Fault
    target: str
    """The node or process it hit (the leader's name for `leader`)."""
    began_s: float
    ended_s: float
    """When the nemesis stopped interfering: SIGCONT sent, the node restarted, the links healed, or (a
    supervised process killed) the kill itself, since the system brings that one back alone."""
    back_s: float = 0.0
    """When every process served again and the stream's replicas were current."""
    recovered_s: float | None = None
    """From `ended_s` to the next episode completed; None when none completed after it."""
    completed_during: int = 0
    """Episodes completed between `began_s` and `ended_s`: what the system did while the fault lasted."""
    journal_behind: int | None = None
    """Disk kinds: the messages the stream held and the journal did not at `ended_s` (None: it did not answer)."""
    journal_caught_up_s: float | None = None
    """Disk kinds: from `ended_s` until the journal held everything the stream held then."""


@dataclass
class Progress:
    """The episodes the runner has completed, and when: what faults wait on, and what recovery is timed by."""

    began: float = field(default_factory=anyio.current_time)
    completions: list[float] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def now(self) -> float:
        return anyio.current_time() - self.began

    def completed(self) -> None:
        self.completions.append(self.now())
        self._changed.set()
        self._changed = anyio.Event()

    async def reached(self, count: int) -> None:
        while len(self.completions) < count:
            await self._changed.wait()

    async def completed_after(self, t: float) -> None:
        while not self.completions or self.completions[-1] < t:
            await self._changed.wait()

    def recovery(self, ended_s: float) -> float | None:
        after = [t for t in self.completions if t >= ended_s]
        return min(after) - ended_s if after else None


@dataclass
class Nemesis:
    """Applies `schedule` to the system of `supervisor` on `cluster`, and puts every process back after."""

    schedule: Schedule
    cluster: Cluster
    supervisor: Supervisor
    progress: Progress
    disk: Disk | None = None
    """The journal's own disk, for the disk kinds."""
    clocks: Path | None = None
    """The folder of each process's clock offset (`bench._wallclock`), for the clock kind."""
    applied: list[Applied] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)
    """Set once the last fault is undone and every process is back."""
    _held: dict[str, anyio.Lock] = field(default_factory=dict)

    async def run(self) -> None:
        if self.schedule.overlap:
            await self._overlapping()
        else:
            for fault in self.schedule.faults:
                await self.progress.reached(fault.after_episodes)
                await anyio.sleep(fault.delay_s)
                await self._applied(fault)
                await self.progress.completed_after(self.applied[-1].ended_s)
        self.done.set()

    async def _overlapping(self) -> None:
        """Each fault in a task of its own, begun at its count or `delay_s` after the one before began, once
        no fault that lasts holds what it holds."""
        began = anyio.Event()
        async with anyio.create_task_group() as tg:
            for fault in self.schedule.faults:
                if fault.with_previous:
                    await began.wait()
                else:
                    await self.progress.reached(fault.after_episodes)
                await anyio.sleep(fault.delay_s)
                began = anyio.Event()
                tg.start_soon(self._applied, fault, began)

    async def _applied(self, fault: Fault, began: anyio.Event | None = None) -> None:
        async with contextlib.AsyncExitStack() as stack:
            for name in sorted(holds(fault)):  # in one order: no two faults wait for each other
                await stack.enter_async_context(self._held.setdefault(name, anyio.Lock()))
            if began is not None:
                began.set()
            applied = await self._apply(fault)
            applied.back_s = self.progress.now()
        self.applied.append(applied)

    def settle(self) -> None:
        """Recovery times, once the run is over and every completion is known."""
        self.applied.sort(key=lambda applied: applied.began_s)
        for applied in self.applied:
            applied.recovered_s = self.progress.recovery(applied.ended_s)
            applied.completed_during = sum(applied.began_s <= t < applied.ended_s for t in self.progress.completions)

    async def _apply(self, fault: Fault) -> Applied:
        bus = self.supervisor.bus
        assert bus is not None
        target = await stream_leader(bus) if fault.target == LEADER else fault.target
        if fault.kind in NETWORK_KINDS:
            return await self._steer(fault, target)
        if fault.kind in DISK_KINDS:
            return await self._disk_fault(fault)
        if fault.kind is Kind.CLOCK:
            return await self._step_clock(fault, target)
        if target in self.cluster.nodes:
            pid = self.cluster.pid(target)
            apply = self._kill_node if fault.kind is Kind.KILL else self._pause_node
        else:
            found = self.supervisor.pid(target)
            assert found is not None, f"no process {target}"
            pid = found
            apply = self._kill_process if fault.kind is Kind.KILL else self._pause_process
        return await apply(fault, target, pid)

    async def _kill_node(self, fault: Fault, name: str, pid: int) -> Applied:
        node = self.cluster.nodes[name]
        os.kill(pid, signal.SIGKILL)
        began_s = self.progress.now()
        await anyio.to_thread.run_sync(node.wait)
        try:
            await anyio.sleep(fault.duration_s)
        finally:
            with anyio.CancelScope(shield=True):  # also when the run is cancelled: every node comes back
                await anyio.to_thread.run_sync(node.restart)
        ended_s = self.progress.now()
        await self._replicas_current()
        return Applied(fault=fault, target=name, began_s=began_s, ended_s=ended_s)

    async def _pause_node(self, fault: Fault, name: str, pid: int) -> Applied:
        began_s, ended_s = await self._paused(pid, fault.duration_s)
        await self._replicas_current()
        return Applied(fault=fault, target=name, began_s=began_s, ended_s=ended_s)

    async def _kill_process(self, fault: Fault, name: str, pid: int) -> Applied:
        os.kill(pid, signal.SIGKILL)
        began_s = self.progress.now()
        await self._served_again(name, pid)
        return Applied(fault=fault, target=name, began_s=began_s, ended_s=began_s)

    async def _pause_process(self, fault: Fault, name: str, pid: int) -> Applied:
        began_s, ended_s = await self._paused(pid, fault.duration_s)
        return Applied(fault=fault, target=name, began_s=began_s, ended_s=ended_s)

    async def _steer(self, fault: Fault, name: str) -> Applied:
        """Cut, slow, or hold one way or both every link from or to `name` (a bridge: those between `name` and
        its peer) for the fault's duration, then heal them."""
        network = self.cluster.network
        assert network is not None, f"{fault.kind} needs a cluster made with a network"
        links = network.touching(name)
        if fault.kind is Kind.BRIDGE:
            links = [link for link in links if fault.peer in (link.source, link.target)]
        assert links, f"no link from or to {name}"
        for link in links:
            if fault.kind in (Kind.PARTITION, Kind.BRIDGE):
                link.partition()
            elif fault.kind is Kind.ONE_WAY:
                far = link.target if link.source == name else link.source
                link.hold(name if fault.direction == "in" else far)
            elif fault.kind is Kind.BLACK_HOLE:
                link.hold(link.source, link.target)
            else:
                link.delay(fault.latency_s)
        began_s = self.progress.now()
        try:
            await anyio.sleep(fault.duration_s)
        finally:
            for link in links:  # also when the run is cancelled: no link is left cut
                link.heal()
        ended_s = self.progress.now()
        await self._replicas_current()
        return Applied(fault=fault, target=name, began_s=began_s, ended_s=ended_s)

    async def _disk_fault(self, fault: Fault) -> Applied:
        """Fill or slow the journal's disk for the fault's duration, then free or heal it; back once the
        journal writes again."""
        disk = self.disk
        assert disk is not None, f"{fault.kind} needs the journal on a disk of its own"
        try:
            if fault.kind is Kind.DISK_FULL:
                await anyio.to_thread.run_sync(disk.fill)
            else:
                disk.slow(fault.iops)
            began_s = self.progress.now()
            await anyio.sleep(fault.duration_s)
        finally:
            with anyio.CancelScope(shield=True):  # also when the run is cancelled: the disk is left as it was
                await anyio.to_thread.run_sync(disk.free if fault.kind is Kind.DISK_FULL else disk.heal)
        ended_s = self.progress.now()
        behind, caught_up_s = await self._catching_up(ended_s)
        applied = Applied(fault=fault, target=DISK, began_s=began_s, ended_s=ended_s)
        applied.journal_behind, applied.journal_caught_up_s = behind, caught_up_s
        return applied

    async def _step_clock(self, fault: Fault, name: str) -> Applied:
        """Step `name`'s wall clock by the fault's offset, and back after its duration."""
        assert self.clocks is not None, f"{fault.kind} needs processes started with a clock of their own"
        path = self.clocks / name
        _wallclock.step(path, fault.offset_s, self.supervisor.pid(name))
        began_s = self.progress.now()
        try:
            await anyio.sleep(fault.duration_s)
        finally:
            _wallclock.step(path, 0.0, self.supervisor.pid(name))  # also when the run is cancelled
        return Applied(fault=fault, target=name, began_s=began_s, ended_s=self.progress.now())

    async def _catching_up(self, ended_s: float) -> tuple[int | None, float]:
        """How far the journal was behind the stream at `ended_s` (None when it did not answer), and how long
        it took from then to hold everything the stream held."""
        bus = self.supervisor.bus
        assert bus is not None
        try:  # the journal first: it never holds more than the stream holds after
            held: int | None = (await ask_journal(bus, JOURNAL_ASK_S)).last_seq
        except (NoResponderError, ReplyTimeoutError):
            held = None
        with fail_after(RESTART_TIMEOUT_S, "the stream did not say its last sequence"):
            while True:
                try:
                    last = (await bus.stream_state()).last_seq
                    break
                except BusError:  # no leader, while an overlapping fault lasts: asked again
                    await anyio.sleep(POLL_S)
        behind = None if held is None else last - held
        await self.journal_writes(until=last)
        return behind, self.progress.now() - ended_s

    async def journal_writes(self, until: int = 0) -> None:
        """Wait until the journal service answers that it can write (it retries a refused batch with backoff)
        and holds the stream up to `until`."""
        bus = self.supervisor.bus
        assert bus is not None
        said = "it did not answer"
        with fail_after(RESTART_TIMEOUT_S, "the journal did not write again", lambda: said):
            while True:
                try:
                    state = await ask_journal(bus, JOURNAL_ASK_S, until)
                    if not state.stuck and state.last_seq >= until:
                        return
                    said = f"it says: {state.stuck}" if state.stuck else f"it holds {state.last_seq} of {until}"
                except (NoResponderError, ReplyTimeoutError):
                    pass  # restarting, or not there yet: asked again
                await anyio.sleep(POLL_S)

    async def _paused(self, pid: int, duration_s: float) -> tuple[float, float]:
        os.kill(pid, signal.SIGSTOP)
        began_s = self.progress.now()
        try:
            await anyio.sleep(duration_s)
        finally:
            os.kill(pid, signal.SIGCONT)  # also when the run is cancelled: no process is left stopped
        return began_s, self.progress.now()

    async def _served_again(self, name: str, old_pid: int) -> None:
        """Wait until the supervisor has restarted `name` and the new process announced it serves."""
        with fail_after(RESTART_TIMEOUT_S, f"{name} was not restarted and serving"):
            while True:
                row = next(row for row in self.supervisor.status() if row["name"] == name)
                if row["pid"] != old_pid and row["ready"]:
                    return
                await anyio.sleep(POLL_S)

    async def _replicas_current(self) -> None:
        bus = self.supervisor.bus
        assert bus is not None
        await replicas_current(bus)

    async def all_back(self) -> None:
        """Every process of the system serves and the stream's three replicas are current."""
        with fail_after(RESTART_TIMEOUT_S, "not every process served again", self.supervisor.status):
            while not all(row["ready"] for row in self.supervisor.status()):
                await anyio.sleep(POLL_S)
        await self._replicas_current()


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank `p` percentile (0 < p <= 100) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]
