"""`faultline view`: one HTML file of a real run with a fault and an attribution, read as data and in Chromium."""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from faultline.cli import main
from faultline.core import ErrorRaised, FaultApplied, Note
from faultline.journal import JournalReader
from faultline.journal._view import DECISIVE, FAULT, REPAIRED_INPUT
from faultline.replay import forks_path
from tests.report.journals import episode, write_journal

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
"""Where the browser test leaves its screenshot (git-ignored)."""


def _run(args: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) in (0, 1), args
    return out.getvalue()


class Viewed:
    def __init__(self, journal: Path, html: Path, attribution: dict[str, Any]) -> None:
        self.journal, self.html, self.attribution = journal, html, attribution
        text = html.read_text()
        self.text = text
        self.index: list[dict[str, Any]] = json.loads(_tag(text, "index"))

    def entry(self, episode: str) -> dict[str, Any]:
        return next(e for e in self.index if e["id"] == episode)

    def chunk(self, episode: str) -> dict[str, Any]:
        data = _tag(self.text, f"c{self.entry(episode)['chunk']}")
        return json.loads(gzip.decompress(base64.b64decode(data)))  # type: ignore[no-any-return]


def _tag(text: str, tag_id: str) -> str:
    found = re.search(rf'<script type="[^"]+" id="{tag_id}">(.*?)</script>', text, re.S)
    assert found, tag_id
    return found.group(1).replace("<\\/", "</")


@pytest.fixture(scope="module")
def viewed(tmp_path_factory: pytest.TempPathFactory) -> Viewed:
    """One sim episode that a message storm made fail, attributed to a step, and its view with the repair forks.

    Whether the duplicated calls fail the episode, and whether one step decides the failure, depend on how
    their results interleave with the tool agent's next decisions, which the two processes' timing decides:
    the first seed whose failure is attributed to a step is taken.
    """
    for seed in range(3, 9):
        journal = tmp_path_factory.mktemp("view") / "run.sqlite"
        run = ["run", "--tasks", "1", "--error-rates", "0.1", "--seed", str(seed), "--journal", str(journal), "--json"]
        _run([*run, "--fault", "storm:copies=2,kind=tool_call"])
        with JournalReader(journal) as reader:
            if not any(e.outcome == "failure" for e in reader.episodes()):
                continue
        attribution = json.loads(_run(["attribute", str(journal), "--all-failed", "--json"]).splitlines()[0])
        if attribution["position"] is not None:
            break
    else:
        pytest.fail("a storm of duplicated tool calls failed no episode of six seeds at a step attribution found")
    html = journal.with_suffix(".html")
    assert _run(["view", str(journal)]).strip() == str(html)
    return Viewed(journal, html, attribution)


@pytest.mark.slow
def test_the_page_holds_every_episode_and_fork_with_faults_and_the_attributed_step_marked(viewed: Viewed) -> None:
    assert not re.search(r"(src|href)=\"(https?:)?//", viewed.text), "the page fetches nothing"
    with JournalReader(viewed.journal) as reader:
        episodes = [e.episode for e in reader.episodes()]
        rows = list(reader.episode_rows(viewed.attribution["episode"]))
    with JournalReader(forks_path(viewed.journal)) as reader:
        forks = [e.episode for e in reader.episodes()]
    assert [e["id"] for e in viewed.index] == episodes + forks
    episode = viewed.attribution["episode"]
    chunk = viewed.chunk(episode)
    assert [r[0] for r in chunk["rows"]] == [r.pos for r in rows]
    assert [r[0] for r in chunk["rows"] if r[7] & FAULT] == [r.pos for r in rows if r.kind == "fault_applied"]
    repaired = [r[0] for r in chunk["rows"] if r[7] & REPAIRED_INPUT]
    assert repaired == [viewed.attribution["position"]]  # the position the table and the fork id name
    assert [r[0] for r in chunk["rows"] if r[7] & DECISIVE]  # and what the agent did with it
    assert viewed.entry(episode)["attribution"]["agent"] == viewed.attribution["agent"]
    model_call = next(r for r in chunk["rows"] if r[6].get("llm"))
    prompt = [chunk["parts"][i] for i in model_call[6]["prompt"]]
    recorded = next(r for r in rows if r.pos == model_call[0]).decoded_body()
    assert prompt == recorded.request["messages"]  # type: ignore[attr-defined]
    fork = viewed.entry(viewed.entry(episode)["attribution"]["fork"])
    assert fork["id"] in [f["fork"] for probe in viewed.attribution["evidence"] for f in probe["forks"]]
    assert fork["forked_from"] == episode and fork["outcome"] == "success"
    fork_rows = viewed.chunk(fork["id"])["rows"]
    at = next(r for r in rows if r.pos == fork["forked_at"]).decoded_body()
    undone = {m["id"] for m in at.results} if isinstance(at, FaultApplied) else set()  # an undone fault never sent them
    history = [r for r in rows if r.pos < fork["forked_at"] and r.id not in undone]
    assert fork["fork_point"] >= len(history)  # the message an undone fault had replaced keeps its id
    assert [r[4] for r in fork_rows[: len(history)]] == [r.kind for r in history]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="no Chromium found: install the distro's chromium package")
def test_in_chromium_an_episode_shows_its_lanes_fault_and_a_model_calls_prompt(viewed: Viewed) -> None:
    from playwright.sync_api import sync_playwright

    episode = viewed.attribution["episode"]
    chunk = viewed.chunk(episode)
    lanes = list(dict.fromkeys(r[2] for r in chunk["rows"]))
    first_call = next(r for r in chunk["rows"] if r[6].get("llm"))
    first_message = chunk["parts"][first_call[6]["prompt"][0]]["content"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 950})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(viewed.html.as_uri())
            page.click(f'tr[data-episode="{episode}"]')
            page.wait_for_selector(".msg")
            assert page.locator(".lane-head").all_inner_texts() == ["pos", *lanes]
            assert page.locator(".msg.fault").count() == len([r for r in chunk["rows"] if r[7] & FAULT])
            assert page.locator(f'.msg.input[data-pos="{viewed.attribution["position"]}"]').count() == 1
            assert page.locator(f'.msg.llm[data-pos="{first_call[0]}"]').is_hidden()  # inside what it produced
            page.click(f'.call-chip[data-pos="{first_call[0]}"]')
            page.wait_for_selector("#detail.open .prompt pre")
            assert page.locator("#detail .prompt pre").first.inner_text() == first_message
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=ARTIFACTS / "view-episode.png")
            assert not errors
        finally:
            browser.close()


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="no Chromium found: install the distro's chromium package")
@pytest.mark.parametrize("size", [(1440, 900), (1024, 768)], ids=["1440x900", "1024x768"])
def test_in_chromium_forks_sit_under_their_original_and_search_bookkeeping_and_model_use_work(
    viewed: Viewed, size: tuple[int, int]
) -> None:
    from playwright.sync_api import sync_playwright

    episode = viewed.attribution["episode"]
    forks = [e["id"] for e in viewed.index if e["forked_from"] == episode]
    chunk = viewed.chunk(episode)
    folded = [
        r
        for r in chunk["rows"]
        if r[4] in ("no_output", "tally", "recording") and not (r[6].get("llm") and r[9] is None)
    ]
    assert folded, "the episode has bookkeeping rows to fold"
    model_users = sorted({r[2] for r in chunk["rows"] if r[6].get("llm")})
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": size[0], "height": size[1]})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(viewed.html.as_uri())
            listed = page.locator("tr[data-episode]").evaluate_all("rows => rows.map(r => r.dataset.episode)")
            assert listed[: 1 + len(forks)] == [episode, *forks]  # each fork right under its original
            assert page.locator("tr.fork-row").count() == len(forks)
            page.click(f'tr[data-episode="{episode}"]')
            page.wait_for_selector(".msg")
            assert sorted(page.locator("table.agents tr[data-agent]").evaluate_all(
                "rows => rows.map(r => r.dataset.agent)")) == model_users  # fmt: skip
            calls = [r for r in chunk["rows"] if r[6].get("llm")]
            assert page.locator(".waterfall .wf-row").evaluate_all("rows => rows.map(r => r.dataset.agent)") == [
                a for a in dict.fromkeys(r[2] for r in chunk["rows"]) if a in model_users
            ]
            assert page.locator(".waterfall .bar").count() == len(calls)  # one bar per model call
            nested = [r for r in calls if r[9] is not None]
            assert nested and page.locator(".call-chip").count() == len(nested)  # each inside what it produced
            after = [r for r in chunk["rows"] if r[8] is not None]
            assert after and page.locator(".when .took").count() >= min(len(after), 1)
            shown = page.locator(".lanes .msg:visible").count()
            page.check("#f-bookkeeping")
            assert page.locator(".lanes .msg:visible").count() == shown + len(folded)
            page.fill("#f-search", "no message holds this text")
            page.wait_for_function("document.querySelectorAll('tr[data-episode]').length === 0")
            page.fill("#f-search", "")
            page.wait_for_selector(f'tr[data-episode="{episode}"]')
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=ARTIFACTS / f"view-list-{size[0]}x{size[1]}.png")
            assert not errors
        finally:
            browser.close()


TRACEBACK = (
    'Traceback (most recent call last):\n  File "kitchen.py", line 24, in on_message\nValueError: no pot for soup\n'
)
"""What a handler that raised left in its episode's `error_raised` row."""


@pytest.fixture
def errored(tmp_path: Path) -> Viewed:
    """The view of an episode whose pantry raised: its cause is the error, its `error_raised` row the traceback."""
    raised = ErrorRaised(agent="pantry", input_id="m1", error_type="ValueError", message="no pot for soup",
                         traceback=TRACEBACK)  # fmt: skip
    steps = [("planner", "pantry", Note(text="soup")), ("pantry", "", raised, "m1")]
    journal = write_journal(tmp_path / "run.sqlite", episode("soup", "soup", steps, outcome="error"))  # type: ignore[arg-type]
    html = tmp_path / "view.html"
    assert _run(["view", str(journal), "-o", str(html)]).strip() == str(html)
    return Viewed(journal, html, {"episode": "soup"})


def test_an_errored_episode_carries_its_handlers_traceback(errored: Viewed) -> None:
    assert errored.entry("soup")["traceback"] == TRACEBACK


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="no Chromium found: install the distro's chromium package")
def test_in_chromium_the_traceback_opens_under_the_cause_and_beside_its_row(errored: Viewed) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(errored.html.as_uri())
            page.click('tr[data-episode="soup"]')
            page.wait_for_selector("details.traceback")
            folded = page.locator("details.traceback pre")
            assert folded.is_hidden(), "collapsed until asked for"
            page.click("details.traceback summary")
            assert folded.is_visible() and folded.inner_text() == TRACEBACK
            page.click('.msg[data-kind="error_raised"]')
            page.wait_for_selector("#detail.open pre.traceback")
            assert page.locator("#detail pre").first.inner_text() == "ValueError: no pot for soup"
            assert page.locator("#detail pre.traceback").inner_text() == TRACEBACK
            assert not errors
        finally:
            browser.close()
