"""`faultline view --serve`: the page on a local port, made again as the journal grows, and reloaded by the open
page itself (in Chromium, at a laptop's and a small window's size)."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from faultline.journal import Journal, ViewServer
from tests.journal.conftest import episode_envelopes, incoming

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - our own loopback server
        return str(answer.read().decode())


def append_episode(journal: Path, name: str, first_seq: int) -> None:
    with Journal.open(journal) as writer:
        writer.append(incoming(episode_envelopes(name), first_seq=first_seq))


def test_the_page_and_its_version_move_as_episodes_are_journaled(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    append_episode(journal, "ep-first", 1)
    with ViewServer(journal) as server:
        before = fetch(server.url + "version")
        page = fetch(server.url)
        assert "ep-first" in page and "ep-second" not in page
        assert 'fetch("/version"' in page  # the page polls for a newer journal
        assert fetch(server.url + "version") == before  # nothing moved, nothing to reload
        append_episode(journal, "ep-second", 10)
        assert fetch(server.url + "version") != before
        assert "ep-second" in fetch(server.url)
        with pytest.raises(urllib.error.HTTPError):
            fetch(server.url + "elsewhere")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="no Chromium found: install the distro's chromium package")
@pytest.mark.parametrize("size", [(1440, 900), (1024, 768)], ids=["1440x900", "1024x768"])
def test_an_open_page_shows_an_episode_journaled_after_it_opened(tmp_path: Path, size: tuple[int, int]) -> None:
    from playwright.sync_api import sync_playwright

    journal = tmp_path / "j.sqlite"
    append_episode(journal, "ep-first", 1)
    with ViewServer(journal) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": size[0], "height": size[1]})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(server.url + "#ep-first")
            page.wait_for_selector('tr[data-episode="ep-first"]')
            assert page.locator('tr[data-episode="ep-second"]').count() == 0
            append_episode(journal, "ep-second", 10)
            page.wait_for_selector('tr[data-episode="ep-second"]', timeout=15_000)  # the page reloaded itself
            assert page.locator("tr[data-episode]").count() == 2
            assert page.evaluate("location.hash") == "#ep-first"  # the open episode stays open
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=ARTIFACTS / f"view-served-{size[0]}x{size[1]}.png")
            assert not errors
        finally:
            browser.close()
