"""`faultline status` of a system whose workers were started by hand: it knows whom to expect from the
configuration, and names the worker that went away.

It listed whatever answered, and waited only for the workers of a `faultline up` running in the same folder: a
worker started by hand that had stopped was simply not there, and the exit status said all was well.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultline.bus import Bus, EmbeddedServer, hear
from faultline.cli import main
from faultline.runtime import STATUS_WAIT_S
from faultline.runtime._episodes import PROCESS_SERVICE, READY
from tests import jsonl
from tests.runtime.test_processes import faultline, finish

pytestmark = pytest.mark.slow

SERVE_WAIT_S = 60.0
"""How long the two workers may take to start and serve."""
AGENTS = ["env", "tool", "user"]


async def started_by_hand(folder: Path, url: str, shards: int) -> list[subprocess.Popen[bytes]]:
    """`faultline worker` for each shard of the configuration's group `main`, once each says it serves."""
    bus = await Bus.connect(url)
    serving = 0
    every_one = anyio.Event()

    async def ready(_teller: str, _msg: object) -> None:
        nonlocal serving
        serving += 1
        if serving == shards:
            every_one.set()

    try:
        await hear(bus, PROCESS_SERVICE, READY, ready)
        workers = [
            faultline("worker", "--agents", ",".join(AGENTS), "--shard", f"{k}/{shards}", "--name", f"by-hand-{k}",
                      "--nats", url, cwd=folder)
            for k in range(shards)
        ]  # fmt: skip
        with anyio.fail_after(SERVE_WAIT_S):
            await every_one.wait()
        return workers
    finally:
        await bus.close()


def status(url: str, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = main(["status", "--nats", url, *flags])
    return code, capsys.readouterr().out


async def test_status_names_a_configured_worker_started_by_hand_that_went_away(
    nats_server: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "faultline.toml").write_text('[workers.main]\nagents = ["*"]\ncount = 2\n')
    monkeypatch.chdir(tmp_path)  # the configuration status reads is ./faultline.toml, as an operator's would be
    url = nats_server.url
    workers = await started_by_hand(tmp_path, url, 2)
    try:
        code, out = await anyio.to_thread.run_sync(status, url, capsys, "--json")
        rows, summary = jsonl.read(out)
        assert (code, summary["workers"], summary["absent"]) == (0, 2, []), summary

        workers[1].send_signal(signal.SIGTERM)
        await finish(workers[1])
        code, out = await anyio.to_thread.run_sync(status, url, capsys, "--json")
        rows, summary = jsonl.read(out)
        said: list[Any] = [row["worker"] for row in rows if row["type"] == "worker"]
        assert (code, said, summary["silent"]) == (1, ["by-hand-0"], [])
        assert summary["absent"] == [{"group": "main", "shard": "1/2", "agents": AGENTS}]

        code, out = await anyio.to_thread.run_sync(status, url, capsys)
        assert code == 1
        assert (
            f"absent: no worker answered within {STATUS_WAIT_S:g}s for env, tool, user in shard 1/2 of worker group"
            " main, which faultline.toml runs: stopped, stuck or never started"
        ) in " ".join(out.split())
    finally:
        for worker in workers:
            worker.terminate()
            await finish(worker)
