"""Size and speed of `faultline view` pages: 500 sim episodes (about 25k messages) and 1,000 (about 50k).

    python -m bench.view [--episodes 500,1000] [--journal J.sqlite] [--json out.json]

For each run size: the seconds `write_view` takes, the file's size, and in headless
Chromium (the system's, /usr/bin/chromium; skipped when there is none) the time to
first contentful paint, the time until the episode list is on screen, and the time
from a click on an episode until its lanes are drawn (median of 5 episodes).
Targets: under 10 MB per 50k messages, list on screen under 1 s, an episode under 300 ms.
The journals come from the `sim` model (a message storm on 10% of tool calls and
5% mistakes per decision): the numbers measure the viewer, not a model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from faultline.api import SIM_NOTE
from faultline.journal import JournalReader, write_view

TASKS = 50
MAX_BYTES_PER_50K = 10_000_000
MAX_LIST_S = 1.0
MAX_OPEN_S = 0.3


def make_journal(episodes: int, tmp: Path) -> Path:
    journal = tmp / f"{episodes}.sqlite"
    cmd = [sys.executable, "-m", "faultline.cli", "run", "--tasks", str(TASKS), "--trials", str(episodes // TASKS)]
    cmd += ["--error-rates", "0.05", "--fault", "storm:copies=2,kind=tool_call,probability=0.1"]
    cmd += ["--concurrency", "32", "--journal", str(journal), "--json"]
    subprocess.run(cmd, check=True, capture_output=True)
    return journal


def in_browser(html: Path, episodes: list[str]) -> dict[str, float]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return {}
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 950})
        page.goto(html.as_uri())
        page.wait_for_selector("tr[data-episode]")
        paint = page.evaluate("() => performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? -1")
        listed = page.evaluate("() => performance.getEntriesByName('faultline-list')[0].startTime")
        opened = []
        for episode in episodes:
            page.evaluate(
                "(id) => { window.__t = performance.now(); document.querySelector(`tr[data-episode='${id}']`).click(); }",
                episode,
            )
            page.wait_for_function(
                "(id) => document.querySelector('#episode h2')?.textContent === id && document.querySelector('.msg')",
                arg=episode,
            )
            opened.append(page.evaluate("() => performance.now() - window.__t"))
        browser.close()
    return {"first_paint_s": paint / 1000, "list_s": listed / 1000, "open_episode_s": statistics.median(opened) / 1000}


def measure(journal: Path, tmp: Path) -> dict[str, Any]:
    html = tmp / f"{journal.stem}.html"
    started = time.perf_counter()
    stats = write_view(journal, html)
    written = time.perf_counter() - started
    with JournalReader(journal) as reader:
        first_page = [e.episode for e in reader.episodes()[:5]]
    result: dict[str, Any] = {
        "episodes": stats.episodes,
        "messages": stats.messages,
        "bytes": stats.bytes,
        "write_s": written,
    }
    result |= in_browser(html, first_page)
    return result


def table(results: list[dict[str, Any]]) -> Table:
    out = Table(title="faultline view (sim journals: the numbers measure the viewer, not a model)")
    for column in ("episodes", "messages", "file", "target", "write", "first paint", "list", "open episode"):
        out.add_column(column, justify="right")
    for r in results:
        limit = MAX_BYTES_PER_50K * max(r["messages"], 1) / 50_000
        mark = lambda ok: "PASS" if ok else "MISS"  # noqa: E731
        browser = "list_s" in r
        out.add_row(
            str(r["episodes"]),
            f"{r['messages']:,}",
            f"{r['bytes'] / 1e6:.1f} MB",
            f"< {limit / 1e6:.1f} MB {mark(r['bytes'] < limit)}",
            f"{r['write_s']:.1f} s",
            f"{r['first_paint_s'] * 1000:.0f} ms" if browser else "no chromium",
            f"{r['list_s'] * 1000:.0f} ms {mark(r['list_s'] < MAX_LIST_S)}" if browser else "",
            f"{r['open_episode_s'] * 1000:.0f} ms {mark(r['open_episode_s'] < MAX_OPEN_S)}" if browser else "",
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", default="500,1000", help="comma-separated run sizes (default 500,1000)")
    parser.add_argument("--journal", type=Path, help="measure this journal instead of making sim runs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        journals = (
            [args.journal] if args.journal else [make_journal(int(n), Path(tmp)) for n in args.episodes.split(",")]
        )
        for journal in journals:
            results.append(measure(journal, Path(tmp)))
    Console().print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"note": SIM_NOTE, "results": results}, indent=2))


if __name__ == "__main__":
    main()
