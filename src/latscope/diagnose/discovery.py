"""Finding out what the target is before experimenting on it: the model to use, and whether it answers at all.

A target that cannot be reached (DNS, TCP connect or TLS fails) ends the diagnosis before any experiment with a
:class:`TargetUnreachable` naming the phase ("connect: TCP connect to 127.0.0.1:9 failed: connection refused"); one
that refuses the request itself (wrong model, wrong key) with a :class:`DiagnoseError`. Anything later — errors,
429s, resets during the experiments — only marks the affected checks as not tested.
"""

from __future__ import annotations

import asyncio
from typing import Any

from latscope.diagnose.context import Context
from latscope.signals import Snapshot, detect_family, metrics_url_for, scrape_once
from latscope.signals.altsvc import h3_advertised
from latscope.signals.join import join_server_signals
from latscope.timeline.model import Phase, Timeline
from latscope.wire import ModelListError, WireError

#: Failures in these phases mean nothing reached the server.
UNREACHABLE_PHASES = frozenset({Phase.DNS, Phase.CONNECT, Phase.TLS, Phase.POOL})
#: Statuses of the first request that mean "your request is wrong", not "the server misbehaves".
USAGE_STATUSES = frozenset({400, 401, 403, 404, 405, 422})


class DiagnoseError(Exception):
    """The diagnosis could not start; the message says why and what to do."""


class TargetUnreachable(DiagnoseError):
    """Nothing reached the target; the message starts with the phase that failed."""


def _unreachable(phase: Phase | str, message: str) -> TargetUnreachable:
    return TargetUnreachable(f"{phase}: {message}")


async def discover_model(ctx: Context) -> list[str]:
    """The model ids the target's model list names (:meth:`latscope.wire.Client.list_models`). Raises
    :class:`TargetUnreachable` or :class:`DiagnoseError`."""
    async with ctx.client() as client:
        try:
            models, _ = await client.list_models(ctx.base_url, ctx.dialect)
        except WireError as err:
            if err.phase in UNREACHABLE_PHASES:
                raise _unreachable(err.phase, err.message) from None
            where = ctx.base_url + ctx.dialect.models_path
            raise DiagnoseError(f"listing models at {where} failed ({err.message}); pass --model") from None
        except ModelListError as exc:
            raise DiagnoseError(f"{exc}; pass --model") from None
    return models


async def first_contact(ctx: Context) -> Timeline:
    """One short streamed request: proves the target answers and shows its protocol facts. Raises
    :class:`TargetUnreachable` when nothing reached it, :class:`DiagnoseError` when it refused the request as such."""
    async with ctx.client() as client:
        t = await client.request(ctx.spec(16, 1), ctx.base_url, label="first contact")
    join_server_signals(t)
    if ctx.timelines is not None:
        ctx.timelines.append(t)
    error = t.error
    if error is not None:
        if error.phase in UNREACHABLE_PHASES:
            raise _unreachable(error.phase, error.message)
        if error.status in USAGE_STATUSES:
            raise DiagnoseError(f"the target refused a {ctx.dialect.mode} request: {error.message}")
    return t


#: Dialects that only one engine speaks: the dialect names the engine, no scrape needed.
DIALECT_ENGINES = {"ollama.chat": "ollama", "ollama.generate": "ollama", "tgi.generate": "tgi"}


async def identify_engine(ctx: Context, first: Timeline) -> str | None:
    """The engine behind the target: the one its dialect implies (:data:`DIALECT_ENGINES`), else by the names its
    ``/metrics`` uses (:func:`~latscope.signals.detect_family`: ``vllm``, ``sglang``, ``tgi``, ``llamacpp``,
    ``triton``, ``lab``), else by llama.cpp's ``server`` header; None when none tells. One scrape, on a client of its
    own; a target without metrics costs one refused GET."""
    implied = DIALECT_ENGINES.get(ctx.dialect.name)
    if implied is not None:
        return implied
    async with ctx.client() as client:
        snapshot = await scrape_once(client.fetch, metrics_url_for(ctx.base_url))
    family = detect_family(snapshot) if isinstance(snapshot, Snapshot) else None
    if family is None and "llama.cpp" in (first.response_headers.get("server") or ""):
        family = "llamacpp"
    return family


#: Body fields each engine accepts that make its stream say how many tokens every event carried.
TOKEN_COUNT_FIELDS: dict[str, dict[str, object]] = {
    # one event per engine output, listing its token ids; several tokens when the API server fell behind
    # (vllm/entrypoints/openai/chat_completion/protocol.py, ``return_token_ids``)
    "vllm": {"return_token_ids": True},
}


def token_count_fields(engine: str | None, dialect: str) -> dict[str, object]:
    """The body fields (:data:`TOKEN_COUNT_FIELDS`) that make ``engine`` count each event's tokens, for the OpenAI
    dialects; empty for any other engine or dialect."""
    if engine is None or not dialect.startswith("openai.") or dialect == "openai.responses":
        return {}
    return dict(TOKEN_COUNT_FIELDS.get(engine, {}))


#: How long a liveness check may take, s: a short prompt and one token, on a target that answered before.
ALIVE_TIMEOUT_S = 15.0


async def still_answering(ctx: Context) -> bool:
    """True when one short streamed request still completes within :data:`ALIVE_TIMEOUT_S` (checked after an
    experiment ran out of time, before spending the next one's)."""
    async with ctx.client() as client:
        try:
            t = await asyncio.wait_for(client.request(ctx.spec(16, 1), ctx.base_url, label="liveness"), ALIVE_TIMEOUT_S)
        except TimeoutError:
            return False
    return t.ok


def facts(
    ctx: Context,
    t: Timeline | None,
    models: list[str],
    *,
    upload_rate_bps: float | None = None,
    engine: str | None = None,
) -> dict[str, Any]:
    """The JSON ``target`` object: URL, model, protocol and TLS facts, server header, address, RTT (``rtt_ms``),
    when the parsing experiment measured it the path's upload rate (``upload_mbit_s``, Mbit/s), the engine
    :func:`identify_engine` named (``engine``, None when unknown), and the resolved target's ``settings``
    (:meth:`~latscope.wire.target.Target.to_dict`: dialect, redacted headers, timeouts …)."""
    out: dict[str, Any] = {
        "url": ctx.base_url,
        "model": ctx.model,
        "tls": ctx.tls,
        "engine": engine,
        "settings": ctx.target.to_dict(),
    }
    if models:
        out["models"] = models
    if upload_rate_bps is not None:
        out["upload_mbit_s"] = round(upload_rate_bps * 8 / 1e6, 1)
    if t is None:
        return out
    info = t.connection
    if info is not None:
        rtt_us = info.rtt_us
        out.update(info.facts(), rtt_ms=None if rtt_us is None else round(rtt_us / 1000.0, 3))
    out["server"] = t.response_headers.get("server")
    if t.status is not None:
        # Alt-Svc (RFC 7838) on the first contact: whether the target announces HTTP/3, and where
        out["h3_advertised"] = h3_advertised(t.response_headers)
    if t.error is not None:
        out["first_contact_error"] = t.error.message
    return out
