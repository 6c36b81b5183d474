"""What the server reports about itself reaches the diagnosis through the one join of server signals."""

from __future__ import annotations

from latscope.diagnose import diagnose
from tests.wire.rawserver import DONE, RawServer, chunked, event, serve_each_request


async def test_a_server_timing_sent_only_in_a_trailer_reaches_the_diagnose_json() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    head += b"trailer: server-timing\r\n\r\n"
    trailer = b"Server-Timing: queue;dur=3.5, prefill;dur=12.5\r\n"
    response = head + chunked(event("a"), event("b"), DONE) + b"0\r\n" + trailer + b"\r\n"
    async with RawServer(serve_each_request(response)) as server:
        result = await diagnose(server.base_url, model="m", only="no-connection-reuse", quick=True)
    data = result.to_dict()
    assert data["timeline_summary"]["server_phases_ms"] == {"queue": 3.5, "prefill": 12.5}
