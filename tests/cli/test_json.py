"""Every command that takes `--json`, found in the parser, prints JSON lines of one shape (docs/json.md).

One small sim run with a fault feeds the commands that read a journal; a nats-server
with a journal service feeds the ones that talk to a running system; the scripted
OpenAI server feeds `doctor`. A command added with `--json` and no arguments here
fails the test until it gets some.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from faultline.bus import Bus, EmbeddedServer, hear
from faultline.cli import build_parser, main
from faultline.faults import fault_type
from faultline.journal import JournalReader
from faultline.runtime._episodes import PROCESS_SERVICE, READY
from tests import jsonl
from tests.journal.test_otel import Receiver
from tests.openai_server import OpenAIServer
from tests.report.test_metrics import _campaign as hand_made_campaign

SERVE_WAIT_S = 30.0
"""How long the journal service the test starts may take to serve."""


def json_commands() -> list[tuple[str, ...]]:
    """Every command path (`journal episodes`, `inject storm` ...) whose parser has --json."""
    found: list[tuple[str, ...]] = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            for name, sub in subs[0].choices.items():
                walk(sub, (*path, name))
        elif any("--json" in action.option_strings for action in parser._actions):
            found.append(path)

    walk(build_parser(), ())
    return found


@dataclass
class Setting:
    """What the commands are run on."""

    folder: Path
    journal: Path
    failed: str
    at: int
    nats: str = ""
    config: Path = field(default_factory=Path)
    otel: str = ""
    openai: str = ""

    def live(self, *args: str) -> list[str]:
        return [*args, "--nats", self.nats, "--config", str(self.config)]


def _arguments(s: Setting) -> dict[tuple[str, ...], Callable[[], list[str]]]:
    """The arguments (without --json) each command is run with."""
    j, out = str(s.journal), s.folder
    export = out / "plain.jsonl"
    copy = out / "copy.sqlite"
    memory = str(out / "memory.sqlite")
    args: dict[tuple[str, ...], Callable[[], list[str]]] = {
        ("replay",): lambda: [j],
        ("fork",): lambda: [j, "-e", s.failed, "--at", str(s.at), "--keep", "--out", str(out / "fork.sqlite")],
        ("attribute",): lambda: [j, "-e", s.failed, "--out", str(out / "attribution.sqlite")],
        ("diff",): lambda: [f"{j}:{s.failed}", f"{j}:{s.failed}"],
        ("compare",): lambda: [j, str(shutil.copy(s.journal, out / "again.sqlite"))],
        ("view",): lambda: [j, "--out", str(out / "view.html")],
        ("status",): lambda: s.live(),
        ("faults", "list"): lambda: s.live(),
        ("faults", "clear"): lambda: s.live(),
        ("helpers", "set"): lambda: s.live("retail", "dce"),
        ("helpers", "list"): lambda: s.live(),
        ("helpers", "clear"): lambda: s.live("retail"),
        ("journal", "health"): lambda: s.live(),
        ("config", "check"): lambda: ["--config", str(s.config)],
        ("doctor",): lambda: ["--model", "openai", "--base-url", s.openai, "--model-name", "m"],
        ("journal", "verify"): lambda: [j],
        ("journal", "otel"): lambda: [j, "--endpoint", s.otel],
        ("journal", "show"): lambda: [j, "-e", s.failed],
        ("journal", "export"): lambda: [j],
        ("journal", "import"): lambda: [str(export), str(copy)],
        ("journal", "episodes"): lambda: [j],
        ("memory", "rebuild"): lambda: [j, "--out", memory],
        ("memory", "stats"): lambda: ["--store", memory],
        ("memory", "search"): lambda: ["cancel my order", "--store", memory],
        ("fama", "analyze"): lambda: [j, "--model", "sim"],
        ("report",): lambda: [str(hand_made_campaign(out / "campaign"))],
        ("fama", "loop"): lambda: ["--tasks", "1", "--rounds", "1", "--out", str(out / "loop"), "--model", "sim"],
    }
    for path in json_commands():
        if path[0] == "inject":
            args[path] = lambda: s.live("--episode", "no-such-episode-*", "--budget", "1")
    return args


@pytest.fixture
def live(tmp_path: Path) -> Iterator[str]:
    """A nats-server and a journal service on it (as `faultline up` runs them, without workers), once it serves."""
    with EmbeddedServer(store_dir=tmp_path / "nats") as server:
        command = [sys.executable, "-m", "faultline.cli", "journal", "serve", str(tmp_path / "live.sqlite")]
        process = anyio.run(_start_serving, server.url, [*command, "--nats", server.url])
        try:
            yield server.url
        finally:
            process.terminate()
            process.wait(30)


async def _start_serving(url: str, command: list[str]) -> subprocess.Popen[bytes]:
    """Start `command` and wait until it says it serves (as the supervisor waits for its children)."""
    bus = await Bus.connect(url)
    try:
        serving = anyio.Event()
        await hear(bus, PROCESS_SERVICE, READY, lambda _teller, _msg: _set(serving))
        process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        with anyio.fail_after(SERVE_WAIT_S):
            await serving.wait()
        return process
    finally:
        await bus.close()


async def _set(event: anyio.Event) -> None:
    event.set()


@pytest.fixture
def otel() -> Iterator[str]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.url
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_every_command_prints_json_lines_with_a_type_and_one_summary_last(
    tmp_path: Path, live: str, otel: str, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "run.sqlite"
    # Early stop at every decision fails the episode whatever order the storm's copies arrive in.
    run = ["run", "--tasks", "1", "--error-rate", "early_stop=1.0", "--seed", "3", "--journal", str(journal), "--json"]
    outputs = {("run",): (main([*run, "--fault", "storm:copies=2,kind=tool_call"]), capsys.readouterr().out)}
    with JournalReader(journal) as reader:
        failed = next(e.episode for e in reader.episodes() if e.outcome == "failure")
        at = next(r.pos for r in reader.episode_rows(failed) if r.kind == "user_turn")
    config = tmp_path / "faultline.toml"
    # No worker runs on the live system, so no confirmation comes: each live command waits this long, ~30 times.
    config.write_text("[faults]\nconfirm_timeout_s = 0.05\n[helpers]\nconfirm_timeout_s = 0.05\n")
    setting = Setting(tmp_path, journal, failed, at, live, config, otel)
    assert main(["journal", "export", str(journal), "-o", str(tmp_path / "plain.jsonl")]) == 0
    capsys.readouterr()
    commands = json_commands()
    arguments = _arguments(setting)
    assert sorted(set(commands) - set(arguments) - set(outputs)) == [], "give these commands arguments in _arguments"
    with OpenAIServer() as server:
        setting.openai = server.url
        for path in commands:
            if path not in outputs:
                code = main([*path, *arguments[path](), "--json"])
                outputs[path] = (code, capsys.readouterr().out)
    wrong = {}
    for path, (code, out) in outputs.items():
        if path[0] == "inject" and fault_type(path[1]).mechanism == "prompt":  # refused up front: run --fault's
            assert (code, out) == (2, ""), path
            continue
        try:
            assert code in (0, 1), f"exit {code}"
            rows, summary = jsonl.read(out)
            assert all(row["type"] != "summary" for row in rows)
        except AssertionError as exc:
            wrong[" ".join(path)] = f"{exc}: {out[-300:]!r}"
    assert wrong == {}
