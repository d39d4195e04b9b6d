"""`faultline memory rebuild | stats | search | serve`, through the real command line."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from faultline.bus import EmbeddedServer
from faultline.cli import main
from faultline.core import Subjects, episode_shard
from faultline.journal import Incoming, Journal, JournalReader, create_set, shard_path
from faultline.runtime import ProcessSpec, Supervisor
from faultline.services.memory import HashingEmbedder, MemoryStore, TopK, retrieval_body, wait_for_memory
from tests import jsonl
from tests.services.memory.episodes import STREAM, sample_episodes, write_journal


@pytest.fixture(autouse=True)
def no_stray_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty folder, so no faultline.toml around the tests changes the defaults."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """A memory store rebuilt from a journal of the sample episodes."""
    journal = tmp_path / "j.sqlite"
    write_journal(journal, sample_episodes())
    store = tmp_path / "m.sqlite"
    assert main(["memory", "rebuild", str(journal), "--out", str(store)]) == 0
    return store


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_rebuild_reports_what_it_added(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.sqlite"
    write_journal(journal, sample_episodes())
    code, out, _ = run(capsys, "memory", "rebuild", str(journal), "--out", "m.sqlite")
    assert code == 0
    assert "7 entries added from 8 completed episodes" in out
    assert "1 without an entry" in out and "4 written offline" in out
    code, out, _ = run(capsys, "memory", "rebuild", str(journal), "--out", "m.sqlite", "--json")
    _, report = jsonl.read(out)
    assert (report["added"], report["present"], report["entries"]) == (0, 7, 7)


def test_rebuild_writes_to_the_configured_store_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_journal(tmp_path / "j.sqlite", sample_episodes())
    (tmp_path / "faultline.toml").write_text('[memory]\nstore = "memory/here.sqlite"\n')
    code, _, _ = run(capsys, "memory", "rebuild", "j.sqlite")
    assert code == 0
    with MemoryStore(tmp_path / "memory" / "here.sqlite", HashingEmbedder()) as store:
        assert len(store) == 7


def test_stats_as_a_table_and_as_json(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "memory", "stats", "--store", str(filled))
    assert code == 0
    assert f"memory {filled}: 7 entries, embedder hashing-v1 (dim 384)" in out
    assert "retail" in out and "phone" in out and "flat" in out
    code, out, _ = run(capsys, "memory", "stats", "--store", str(filled), "--json")
    domains, data = jsonl.read(out)
    assert data["entries"] == 7
    assert domains == [
        {"type": "domain", "domain": "phone", "entries": 2, "successes": 1, "failures": 1, "index": "flat"},
        {"type": "domain", "domain": "retail", "entries": 5, "successes": 2, "failures": 3, "index": "flat"},
    ]


def test_search_shows_the_entries_the_agent_would_get(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "memory", "search", "cancel my order", "--k", "2", "--domain", "retail", "--store", str(filled)
    )
    assert code == 0
    assert "2 entries for 'cancel my order' (top_k)" in out
    assert "retail/ep-1" in out and "cancel_pending_order" in out
    code, out, _ = run(capsys, "memory", "search", "cancel my order", "--k", "3", "--store", str(filled), "--json")
    entries, found = jsonl.read(out)
    assert found["mode"] == {"type": "top_k", "k": 3}
    assert {"ep-1", "ep-4"} <= {s["entry"]["id"] for s in entries}
    assert found["hidden_tools"] == []
    code, out, _ = run(capsys, "memory", "search", "cancel my order", "--dynamic", "--store", str(filled), "--json")
    _, found = jsonl.read(out)
    assert found["mode"]["type"] == "dynamic"
    assert found["reason"] == "too_few_candidates", "R = 10 needs 21 entries"
    assert found["n"] == 5


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["memory", "rebuild", "missing.sqlite"], 1, "missing.sqlite: no such journal file"),
        (["memory", "stats", "--store", "none.sqlite"], 1, "none.sqlite: no memory store here"),
        (["memory", "search", "x", "--store", "none.sqlite"], 1, "no memory store here"),
        (["memory", "search", "x", "--k", "0"], 2, "argument --k: must be at least 1, got 0"),
        (["memory", "search", "x", "--k", "2", "--dynamic"], 2, "not allowed with argument"),
        (["memory", "serve"], 2, "no NATS server given"),
    ],
)
def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], code: int, says: str) -> None:
    got, out, err = run(capsys, *argv)
    assert got == code
    assert out == ""
    assert says in err and err.count("\n") == 1


def test_an_unreachable_embeddings_endpoint_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_journal(tmp_path / "j.sqlite", sample_episodes())
    (tmp_path / "faultline.toml").write_text(
        '[memory]\nembedder = "openai"\n[memory.openai]\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = ""\nmodel = "embedder"\nmax_retries = 0\n'
    )
    code, _, err = run(capsys, "memory", "rebuild", "j.sqlite")
    assert code == 1
    assert err.startswith("faultline: error: openai endpoint http://127.0.0.1:9/v1 (model embedder): gave up")
    assert "cannot connect" in err


@pytest.mark.slow
async def test_serve_runs_under_the_supervisor(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    store = tmp_path / "memory.sqlite"
    supervisor = Supervisor(
        journal_path=tmp_path / "j.sqlite",
        workers=[ProcessSpec("memory", ("memory", "serve", "--store", str(store)))],
        nats_url=nats_server.url,
        log_dir=tmp_path / "logs",
    )
    async with supervisor.running():
        bus = supervisor.bus
        assert bus is not None
        for envelopes in sample_episodes():
            await bus.publish_all(envelopes)
        with anyio.fail_after(30):
            state = await wait_for_memory(bus)
        assert (state.caught_up, state.entries) == (True, 7)
        body = retrieval_body(domain="phone", query="suspend my line", mode=TopK(k=1))
        reply = await bus.nc.request(bus.subjects.svc("memory"), msgspec.msgpack.encode(body), timeout=10)
        assert [s["entry"]["id"] for s in msgspec.msgpack.decode(reply.data)["entries"]] == ["ep-5"]
    assert supervisor.status()[1]["restarts"] == 0
    with MemoryStore(store, HashingEmbedder()) as memory:
        assert len(memory) == 7
    with JournalReader(tmp_path / "j.sqlite") as reader:
        assert [e.outcome for e in reader.episodes()].count("success") == 3


def test_rebuild_reads_a_journal_set_as_the_journal_it_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sample episodes split over a set of two, each row in its episode's shard at its stream sequence: the
    store rebuilt from the set holds what the one file gives."""
    episodes = sample_episodes()
    write_journal(tmp_path / "j.sqlite", episodes)
    create_set(tmp_path / "set", 2)
    rows = [env for envs in episodes for env in envs]
    subjects = Subjects()
    for shard in range(2):
        with Journal.open(shard_path(tmp_path / "set", shard)) as journal:
            journal.append(
                Incoming(STREAM, seq, subjects.for_envelope(env), env)
                for seq, env in enumerate(rows, start=1)
                if episode_shard(env.episode, 2) == shard
            )
    assert {episode_shard(envs[0].episode, 2) for envs in episodes} == {0, 1}
    _, one, _ = run(capsys, "memory", "rebuild", "j.sqlite", "--out", "one.sqlite", "--json")
    _, two, _ = run(capsys, "memory", "rebuild", "set", "--out", "two.sqlite", "--json")
    same = ("added", "present", "entries", "completed")
    assert [jsonl.read(two)[1][k] for k in same] == [jsonl.read(one)[1][k] for k in same] == [7, 0, 7, 8]
    with (
        MemoryStore(tmp_path / "one.sqlite", HashingEmbedder()) as a,
        MemoryStore(tmp_path / "two.sqlite", HashingEmbedder()) as b,
    ):
        assert sorted(e.query for e in a.entries()) == sorted(e.query for e in b.entries())
