"""``latscope probe``, the Python API: a few streamed requests to one endpoint, each recorded as a full timeline.

The requests go one after another on one client, so the first shows the cold path (DNS, TCP, TLS) and the others
show what reuse saves. The model list is fetched with a separate client, so it does not warm the first request's
connection or TLS session.

``import latscope; await latscope.probe(url)`` works too: this module is callable (see the end of the file).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from latscope.dialects import openai
from latscope.dialects.base import RequestSpec
from latscope.timeline import metrics
from latscope.timeline.model import Phase, Timeline
from latscope.timeline.serialize import timeline_to_dict
from latscope.wire import Client, Timeouts, WireError
from latscope.wire.models import OriginStats, join_url

SCHEMA = "latscope.probe/1"

#: the prompt when neither ``prompt`` nor ``prompt_tokens`` is given: short, and it makes any model produce a steady
#: run of tokens, so the cadence numbers mean something
DEFAULT_PROMPT = "Count from one to one hundred in words, separated by spaces."

#: a failure in these phases means the target cannot be reached at all: the remaining requests are not sent
UNREACHABLE_PHASES = frozenset({Phase.DNS, Phase.CONNECT, Phase.TLS})

MODES = openai.MODES


class ProbeError(Exception):
    """The probe could not start: no model to use, or the model list could not be read. The message says what to do."""


@dataclass
class ProbeResult:
    """What a probe found: the target facts and one timeline per request, in the order sent."""

    base_url: str
    model: str
    mode: str  #: "chat" or "completions"
    models: list[str] = field(default_factory=list)  #: the ids ``GET /models`` listed (empty when model was given)
    timelines: list[Timeline] = field(default_factory=list)
    pool: dict[str, OriginStats] = field(default_factory=dict)  #: the probe client's pool statistics per origin
    models_timeline: Timeline | None = None  #: the ``GET /models`` request, when one was made

    @property
    def ok(self) -> bool:
        """True when every request completed without error."""
        return bool(self.timelines) and all(t.ok for t in self.timelines)

    @property
    def reachable(self) -> bool:
        """False when no request got a response (all failed before the response head)."""
        return any(t.status is not None for t in self.timelines)

    def facts(self) -> dict[str, Any]:
        """Target facts from the first request that got a connection: protocol, TLS, address, server header."""
        facts: dict[str, Any] = {"base_url": self.base_url, "model": self.model, "mode": self.mode}
        for t in self.timelines:
            info = t.connection
            if info is None:
                continue
            facts.update(
                http_version=info.http_version,
                alpn=info.alpn,
                tls_version=info.tls_version,
                remote_address=info.remote_address,
                remote_port=info.remote_port,
                server=t.response_headers.get("server"),
            )
            break
        return facts

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (schema ``latscope.probe/1``): target facts, and per request its serialised timeline
        (``latscope.timeline/1``) with the derived metrics (ms)."""
        return {
            "schema": SCHEMA,
            "target": {**self.facts(), "models": list(self.models)},
            "pool": {origin: asdict(stats) for origin, stats in self.pool.items()},
            "requests": [{"timeline": timeline_to_dict(t), "metrics": metrics.summary(t)} for t in self.timelines],
        }


def normalise_base_url(url: str) -> str:
    """An OpenAI-style base URL: a URL with no path gets ``/v1``; a trailing slash is dropped; no scheme means http."""
    if "://" not in url:
        url = f"http://{url}"
    scheme, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    if not slash or not path.strip("/"):
        return f"{scheme}://{host}/v1"
    return url.rstrip("/")


def build_request(mode: str, model: str, prompt: str, max_tokens: int) -> RequestSpec:
    """The streamed request a probe sends (usage asked for, so token counts come from the server when it can)."""
    if mode == "chat":
        return openai.chat_request(model, prompt, max_tokens)
    if mode == "completions":
        return openai.completions_request(model, prompt, max_tokens)
    raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")


async def list_models(
    base_url: str,
    *,
    verify: bool = True,
    ca_file: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
) -> tuple[list[str], Timeline]:
    """The model ids ``GET {base_url}/models`` lists, and that request's timeline. Raises
    :class:`~latscope.wire.WireError` when the server cannot be reached, :class:`ProbeError` for a bad answer."""
    async with Client(verify=verify, ca_file=ca_file, headers=headers) as client:
        response = await client.get(join_url(base_url, "/models"))
    if response.status >= 400:
        message = response.timeline.error.message if response.timeline.error else f"HTTP {response.status}"
        raise ProbeError(f"listing models at {base_url}/models failed ({message}); pass a model name")
    try:
        models = openai.parse_models(response.body)
    except ValueError as exc:
        raise ProbeError(f"{base_url}/models did not answer a model list ({exc}); pass a model name") from None
    return models, response.timeline


async def probe(
    base_url: str,
    *,
    model: str | None = None,
    prompt: str | None = None,
    prompt_tokens: int | None = None,
    max_tokens: int = 64,
    n: int = 3,
    http2: bool = True,
    verify: bool = True,
    headers: Sequence[tuple[str, str]] = (),
    api_key: str | None = None,
    mode: str = "chat",
    quickack: bool = False,
    ca_file: str | None = None,
    timeouts: Timeouts = Timeouts(),  # noqa: B008 - frozen, so one shared default is safe
) -> ProbeResult:
    """Send ``n`` streamed requests to ``base_url`` one after another on one client and return their timelines.

    ``model`` defaults to the first id ``GET {base_url}/models`` lists. The prompt is ``prompt``, else a synthetic
    prompt of about ``prompt_tokens`` tokens, else :data:`DEFAULT_PROMPT`. ``api_key`` is sent as a Bearer token
    (never recorded: timelines keep headers redacted). Failures of a request are in its timeline; a failure that
    shows the target is unreachable (dns, connect, tls) stops the probe early. Raises
    :class:`~latscope.wire.WireError` when the model list cannot be fetched and :class:`ProbeError` when there is
    no model to use.
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
    base_url = normalise_base_url(base_url)
    all_headers = list(headers)
    if api_key:
        all_headers.append(("Authorization", f"Bearer {api_key}"))
    models: list[str] = []
    models_timeline: Timeline | None = None
    if model is None:
        models, models_timeline = await list_models(base_url, verify=verify, ca_file=ca_file, headers=all_headers)
        if not models:
            raise ProbeError(f"{base_url}/models lists no model; pass a model name")
        model = models[0]
    if prompt is None:
        if prompt_tokens is not None:
            from latscope.dialects.prompts import synthetic_prompt

            prompt = synthetic_prompt(prompt_tokens, seed=0)
        else:
            prompt = DEFAULT_PROMPT
    spec = build_request(mode, model, prompt, max_tokens)
    result = ProbeResult(base_url=base_url, model=model, mode=mode, models=models, models_timeline=models_timeline)
    async with Client(
        verify=verify, ca_file=ca_file, http2=http2, quickack=quickack, headers=all_headers, timeouts=timeouts
    ) as client:
        for index in range(n):
            t = await client.request(spec, base_url, label=f"probe {index + 1}/{n}")
            result.timelines.append(t)
            if t.error is not None and t.error.phase in UNREACHABLE_PHASES:
                break
        result.pool = client.stats()
    return result


class _CallableModule(types.ModuleType):
    """Makes ``latscope.probe(...)`` call :func:`probe` although ``latscope.probe`` is this module."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return probe(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["ProbeError", "ProbeResult", "WireError", "build_request", "list_models", "normalise_base_url", "probe"]
