"""A journal sent as OTLP/HTTP traces to a receiver the test runs, decoded with the OpenTelemetry protobufs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from faultline.cli import main
from faultline.core import ToolResult, episode_shard
from faultline.journal.otel import export_otel

from .conftest import episode_envelopes
from .test_diff import journal_of
from .test_sets import _written_set


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP traces endpoint: keeps every request's spans and headers."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[Any] = []
        self.headers: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.server.spans.extend(scope_spans.spans)
        self.server.headers.append({key.lower(): value for key, value in self.headers.items()})
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def attributes(span: Any) -> dict[str, Any]:
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}


def test_an_episode_becomes_one_trace_with_agent_chat_and_tool_spans(receiver: Receiver, tmp_path: Path) -> None:
    path = journal_of(tmp_path / "j.db", episode_envelopes("ep-a"), episode_envelopes("ep-b", outcome="failure"))
    assert export_otel(path, receiver.url, episodes=["ep-a"]) == (1, len(receiver.spans))
    spans = {span.name: span for span in receiver.spans}
    root = spans["episode retail/t7"]
    assert attributes(root)["faultline.episode"] == "ep-a" and attributes(root)["faultline.outcome"] == "success"
    assert [event.name for event in root.events] == ["faultline.fault_applied"]
    assert {span.trace_id for span in receiver.spans} == {root.trace_id}
    agent = spans["invoke_agent tool_agent"]
    assert agent.parent_span_id == root.span_id
    chat, tool = spans["chat sim-1"], spans["execute_tool get_order"]
    assert chat.parent_span_id == agent.span_id and tool.parent_span_id == agent.span_id
    expected = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "sim-1",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "faultline.journal.pos": 3,
    }
    assert {key: attributes(chat)[key] for key in expected} == expected
    assert attributes(tool)["gen_ai.tool.call.id"] == "c1"
    assert tool.end_time_unix_nano - tool.start_time_unix_nano == 1_000_000_000  # call at t0+1.5 s, result at t0+2.5 s


def test_a_tool_call_that_got_no_result_is_an_error_span_to_the_episodes_end(
    receiver: Receiver, tmp_path: Path
) -> None:
    """A tool whose handler raised answers nothing, and its call, the one the episode ended on, had no span."""
    unanswered = [e for e in episode_envelopes("ep-a", outcome="failure") if not isinstance(e.body, ToolResult)]
    path = journal_of(tmp_path / "j.db", unanswered)
    export_otel(path, receiver.url)
    (tool,) = [span for span in receiver.spans if span.name == "execute_tool get_order"]
    assert attributes(tool)["error.type"] == "no_result"
    assert tool.status.message == "no result before the episode ended"
    assert tool.end_time_unix_nano == max(span.end_time_unix_nano for span in receiver.spans)


def test_exporting_twice_sends_the_same_ids(receiver: Receiver, tmp_path: Path) -> None:
    path = journal_of(tmp_path / "j.db", episode_envelopes("ep-a"))
    export_otel(path, receiver.url)
    first = sorted((span.trace_id, span.span_id, span.parent_span_id) for span in receiver.spans)
    receiver.spans.clear()
    export_otel(path, receiver.url)
    assert sorted((span.trace_id, span.span_id, span.parent_span_id) for span in receiver.spans) == first


def test_the_cli_sends_headers_and_says_what_it_sent(
    receiver: Receiver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = journal_of(tmp_path / "j.db", episode_envelopes("ep-a"), episode_envelopes("ep-b"))
    assert main(["journal", "otel", str(path), "--endpoint", receiver.url, "--header", "Authorization=Bearer k"]) == 0
    assert f"of 2 episodes sent to {receiver.url}" in capsys.readouterr().out
    assert {headers["authorization"] for headers in receiver.headers} == {"Bearer k"}


def test_an_endpoint_that_cannot_be_reached_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = journal_of(tmp_path / "j.db", episode_envelopes("ep-a"))
    server = Receiver()
    url = server.url
    server.server_close()
    assert main(["journal", "otel", str(path), "--endpoint", url, "--timeout", "3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # the exporter's own retries and failure said in that line, not printed beside it
    assert err[0].startswith("faultline: error:") and url in err[0] and err[0].endswith("Connection refused"), err


def test_a_journal_set_exports_the_traces_of_the_same_journal_in_one_file(receiver: Receiver, tmp_path: Path) -> None:
    """Each shard's episodes, read through the set: the same traces and spans as one file of the same episodes,
    but for the journal positions, which are each file's own."""
    episodes = [f"ep{i}" for i in range(6)]
    assert {episode_shard(e, 2) for e in episodes} == {0, 1}
    _written_set(tmp_path / "set", episodes)
    one = journal_of(
        tmp_path / "one.db", *(episode_envelopes(e, t0=1_767_225_600.0 + 100 * i) for i, e in enumerate(episodes))
    )

    def spans(path: Path) -> list[tuple[bytes, bytes, str, int]]:
        receiver.spans.clear()
        assert export_otel(path, receiver.url)[0] == len(episodes)
        return sorted((s.trace_id, s.span_id, s.name, s.start_time_unix_nano) for s in receiver.spans)

    assert spans(tmp_path / "set") == spans(one)
