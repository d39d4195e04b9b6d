"""The controller's service in this process against a real nats-server: a dry run decides and
publishes nothing, and status lists the controller's episodes as services, not as episodes in flight."""

from __future__ import annotations

import time

import anyio
import msgspec

from faultline.bus import Bus, EmbeddedServer
from faultline.core import RUNNER, Envelope, Notice, derive_id
from faultline.runtime import HELPERS_CONTROL, FamaConfig, Worker, read_rosters
from faultline.runtime.models import SimBackend
from faultline.services.fama import CONTROLLER, ROSTER, FamaController, FamaService, case_message, controller_episode
from tests.runtime.live import worker_status
from tests.services.test_fama import CASE


async def _roster_notices(bus: Bus) -> list[Notice]:
    stored = await bus.read_stored([bus.subjects.event("notice", "*")], 5.0)
    found = [d.envelope().body for d in stored]
    return [n for n in found if isinstance(n, Notice) and n.text == ROSTER]


async def test_a_dry_run_journals_its_decision_and_publishes_no_roster(nats_server: EmbeddedServer, bus: Bus) -> None:
    worker = Worker(bus, [FamaController], lambda role: SimBackend())
    service = FamaService(bus, settings=FamaConfig(), worker=worker)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        with anyio.fail_after(20):
            await service.wait_ready()
        for dry_run, model in ((True, "dry"), (False, "live")):
            case = msgspec.structs.replace(CASE, model=model)
            await bus.publish(
                Envelope(
                    id=derive_id(model, 0, "fama"),
                    episode=controller_episode(case.domain, model),
                    sender=RUNNER,
                    recipient=CONTROLLER,
                    body=case_message(case, FamaConfig(min_failures=1, dry_run=dry_run)),
                    ts=time.time(),
                )
            )
            with anyio.fail_after(30):  # notices are read in stream order: the dry run's before the other's
                while len(await _roster_notices(bus)) < 1 + (not dry_run) or service.published < (not dry_run):
                    await anyio.sleep(0.05)
        [status] = await worker_status(nats_server.url, bus.subjects.prefix)
        service.stop()
    decisions = await _roster_notices(bus)
    assert [(n.data["model"], n.data["dry_run"], n.data["roster"]) for n in decisions] == [
        ("dry", True, ["planner"]),
        ("live", False, ["planner"]),
    ]
    assert service.published == 1 and len(await bus.read_stored([bus.subjects.ctl(HELPERS_CONTROL)], 5.0)) == 1
    assert (await read_rosters(bus)).domains == {"retail": {"*": ["planner"]}}
    assert status.agents == [CONTROLLER] and status.episodes == []
    assert status.services == [controller_episode("retail", "dry"), controller_episode("retail", "live")]
