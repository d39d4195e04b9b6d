"""`faultline view --serve`: the viewer's page on a local port, made again as the journal grows.

The page is the static one (`write_view`) with one script more: it asks `/version` every
POLL_S for how far the journal and its forks file are, and reloads (keeping the open
episode, which lives in the URL's fragment) when either moved. The page is rendered once
per version, so many open tabs cost one render. Only the loopback interface is served.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from faultline.journal._reader import JournalReader
from faultline.journal._set import journal_exists
from faultline.journal._view import write_view

log = logging.getLogger(__name__)

POLL_S = 2.0
"""How often an open page asks whether the journal moved."""

LIVE_SCRIPT = f"""<script>
(() => {{
  let seen = null;
  async function poll() {{
    try {{
      const now = await (await fetch("/version", {{cache: "no-store"}})).text();
      if (seen !== null && now !== seen) location.reload();
      seen = now;
    }} catch (e) {{}}
  }}
  poll();
  setInterval(poll, {POLL_S * 1000:.0f});
}})();
</script>
"""


def journal_version(journal: Path, forks: Path | None) -> str:
    """How far `journal` and `forks` are: their last positions, which change exactly when a row is added."""
    parts = []
    for path in (journal, forks):
        if path is not None and journal_exists(path):
            with JournalReader(path) as reader:
                parts.append(str(reader.last_pos))
        else:
            parts.append("-")
    return "/".join(parts)


class ViewServer:
    """Serves the view of `journal` (and `forks`) on 127.0.0.1:`port` (0: a free one) until `close()`."""

    def __init__(
        self,
        journal: Path,
        *,
        forks: Path | None = None,
        episodes: Callable[[], Sequence[str] | None] = lambda: None,
        port: int = 0,
    ) -> None:
        self.journal, self.forks, self.episodes = journal, forks, episodes
        self._folder = tempfile.TemporaryDirectory(prefix="faultline-view-")
        self._rendered: tuple[str, bytes] = ("", b"")
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                if self.path == "/version":
                    self._send(journal_version(server.journal, server.forks).encode(), "text/plain")
                elif self.path in ("/", "/index.html") or self.path.startswith("/?"):
                    self._send(server.page(), "text/html; charset=utf-8")
                else:
                    self.send_error(404)

            def _send(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
                log.debug(format, *args)

        self._http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, name="view-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/"

    def start(self) -> ViewServer:
        self._thread.start()
        return self

    def page(self) -> bytes:
        """The page for the journal as it is now: rendered again only when the journal or its forks moved."""
        with self._lock:
            version = journal_version(self.journal, self.forks)
            if version != self._rendered[0]:
                out = Path(self._folder.name) / "view.html"
                write_view(self.journal, out, episodes=self.episodes(), forks=self.forks)
                page = out.read_text(encoding="utf-8").replace("</body>", f"{LIVE_SCRIPT}</body>", 1)
                self._rendered = (version, page.encode())
            return self._rendered[1]

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._folder.cleanup()

    def __enter__(self) -> ViewServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
