"""The trace-context experiment against servers that name the trace only in the response body: the sent trace id
echoed there clears ``trace-context-dropped`` (the evidence names the body), another trace id there is the finding."""

from __future__ import annotations

from latscope.diagnose import diagnose
from latscope.findings import Clear, Finding, NotTested
from tests.support.stream_server import Handler, Received, Reply, StreamServer, chat_chunk, models_handler, paced_stream

OTHER = "0af7651916cd43dd8448eb211c80319c"


def _first_chunk_carries(trace: str | None) -> Handler:
    """A stream whose first chunk carries ``trace`` as ``traceparent`` (the request's own when None); no header
    names any trace."""

    async def handler(request: Received, reply: Reply) -> None:
        if "/chat/" not in request.target:
            await paced_stream(2)(request, reply)
            return
        first = chat_chunk(role="assistant", content="")
        first["traceparent"] = trace if trace is not None else (request.header("traceparent") or "")
        await reply.start(200, [("content-type", "text/event-stream")])
        await reply.send_event(first)
        final = chat_chunk("hi", finish_reason="stop")
        final["usage"] = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        await reply.send_event(final)
        await reply.send(b"data: [DONE]\n\n")
        await reply.end()

    return handler


async def test_a_server_echoing_the_trace_id_only_in_its_body_is_clear_and_the_evidence_names_the_body() -> None:
    async with StreamServer(models_handler(_first_chunk_carries(None))) as server:
        result = await diagnose(server.base_url, quick=True, only="trace-context-dropped")
    outcome = result.outcome("trace-context-dropped")
    assert isinstance(outcome, Clear), outcome
    assert "body" in outcome.reason
    assert [r["source"] for r in outcome.evidence["returned"]] == ["body"]
    assert outcome.evidence["returned"][0]["trace_id"] == outcome.evidence["sent_trace_id"]


async def test_a_server_naming_another_trace_in_its_body_is_a_finding() -> None:
    other = f"00-{OTHER}-b7ad6b7169203331-01"
    async with StreamServer(models_handler(_first_chunk_carries(other))) as server:
        result = await diagnose(server.base_url, quick=True, only="trace-context-dropped")
    outcome = result.outcome("trace-context-dropped")
    assert isinstance(outcome, Finding), outcome
    assert outcome.evidence["returned"] == [{"source": "body", "trace_id": OTHER}]


async def test_a_server_naming_no_trace_anywhere_is_not_tested() -> None:
    async with StreamServer(models_handler(paced_stream(2))) as server:
        result = await diagnose(server.base_url, quick=True, only="trace-context-dropped")
    assert isinstance(result.outcome("trace-context-dropped"), NotTested)
