"""What every experiment shares: the target, how to build and send its requests, and the progress hook.

Experiments send through :meth:`Context.send`, which records the request's timeline, joins the server's own signals
(Server-Timing, ``timings``, the lab's object) into it, counts it for progress, and turns it into a
:class:`~latscope.checks.samples.RequestSample`. Requests never raise for a failed request: the sample says why.
"""

from __future__ import annotations

import dataclasses
import itertools
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from latscope.checks.ratelimit import RateLimitAnswer
from latscope.checks.samples import RequestSample
from latscope.dialects.base import Dialect, RequestSpec
from latscope.dialects.prompts import synthetic_prompt
from latscope.signals.join import join_server_signals
from latscope.signals.ratelimit import rate_limit_state
from latscope.timeline.model import Phase, Timeline
from latscope.wire import Client, Timeouts
from latscope.wire.client import closed_under_reuse
from latscope.wire.target import Headers, Target

#: Limits of one diagnose request, s: generous for a slow target, bounded so a stalled one cannot hang the run. No
#: total limit: every phase has its own, and each experiment has a wall-clock bound (the runner's); a total limit
#: wraps the pool wait in a task of its own, which adds scheduling delay to the very pool waits the connection
#: experiment measures.
REQUEST_TIMEOUTS = Timeouts(connect_s=10.0, tls_s=10.0, send_s=30.0, headers_s=60.0, read_s=30.0, total_s=None)

#: Seeds are spaced this far apart per request so no two prompts of a run share their first words (a server's
#: prefix cache must not make a repeated prompt look cheaper; see dialects.prompts).
_SEED_STRIDE = 1


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """What the runner reports while it works.

    ``kind`` is ``"experiment"`` (one starts: ``total`` is its planned request count), ``"request"`` (one of its
    requests completed: ``done`` of ``total``) or ``"done"`` (it finished; ``message`` says how).
    """

    kind: str
    experiment: str
    done: int = 0
    total: int = 0
    message: str = ""


ProgressCallback = Callable[[ProgressEvent], None]


@dataclass
class Context:
    """One diagnose run's shared state. ``target`` is where every request goes and how (its headers carry the
    credential, never recorded: timelines keep headers redacted); ``model`` the model every request names; ``quick``
    asks every experiment for its smaller plan; ``direct_url`` is the target's upstream reached directly
    (``--direct``: what the gateway-overhead experiment compares the target with), None when not given;
    ``timelines``, when a list, receives every timeline :meth:`send` records (for ``--otlp``; the runner then resolves
    the target with ``trace_context`` on, so the requests carry a W3C ``traceparent``)."""

    target: Target
    model: str
    quick: bool = False
    direct_url: str | None = None
    progress: ProgressCallback | None = None
    experiment: str = ""
    requests_sent: int = 0
    timelines: list[Timeline] | None = None
    #: every rate-limit refusal an experiment's request met (429, 503 with Retry-After), in order
    rate_limited: list[RateLimitAnswer] = field(default_factory=list)
    #: the last answered request's rate-limit headers, None while no answer carried any
    quota: RateLimitAnswer | None = None
    #: body fields every :meth:`spec` adds for the engine that answered (vLLM's ``return_token_ids``, so that an
    #: event it merged from several tokens counts them all); set once the engine is known, empty until then
    request_extra: Mapping[str, object] = field(default_factory=dict)
    _planned: int = 0
    _done: int = 0
    _seeds: Iterator[int] = field(
        default_factory=lambda: itertools.count(secrets.randbelow(1 << 24) * 64, _SEED_STRIDE)
    )

    @property
    def base_url(self) -> str:
        """The target's base URL, normalised for its dialect."""
        return self.target.base_url

    @property
    def dialect(self) -> Dialect:
        """The API every request speaks."""
        return self.target.dialect

    @property
    def headers(self) -> Headers:
        """The headers every request carries (the credential among them)."""
        return self.target.headers

    @property
    def tls(self) -> bool:
        """True for an https target."""
        return self.target.tls

    # -- clients and requests --------------------------------------------------------------------------------------

    def client(self, **options: Any) -> Client:
        """A fresh measuring client for this target; ``options`` go to :class:`~latscope.wire.Client`."""
        return self.target.client(**options)

    def next_seed(self) -> int:
        """A seed no other request of this run used (prompts differ from their first word)."""
        return next(self._seeds)

    def spec(
        self,
        prompt_tokens: int,
        max_tokens: int,
        *,
        extra: Mapping[str, object] | None = None,
        seed: int | None = None,
    ) -> RequestSpec:
        """A streamed request of the run's dialect with a synthetic prompt of about ``prompt_tokens`` tokens (a fresh
        seed unless given) and ``max_tokens`` tokens to generate."""
        prompt = synthetic_prompt(max(1, prompt_tokens), self.next_seed() if seed is None else seed)
        return self.spec_for(prompt, max_tokens, extra=extra)

    def spec_for(self, prompt: str, max_tokens: int, *, extra: Mapping[str, object] | None = None) -> RequestSpec:
        """A streamed request of the run's dialect with ``prompt`` as its text and ``max_tokens`` to generate (the
        engine's :attr:`request_extra` and ``extra`` in its body)."""
        fields = {**self.request_extra, **extra} if extra else self.request_extra
        return self.dialect.build_request(self.model, prompt, max_tokens, extra=fields or None)

    @staticmethod
    def with_body(spec: RequestSpec, body: bytes) -> RequestSpec:
        """``spec`` with its body replaced (whitespace-padded JSON)."""
        return dataclasses.replace(spec, body=body)

    async def send(
        self,
        client: Client,
        spec: RequestSpec,
        *,
        label: str,
        new_connection: bool = False,
        timeline: Timeline | None = None,
        base_url: str | None = None,
    ) -> RequestSample:
        """Send one request, join the server's signals into its timeline, and return its sample (see
        :meth:`send_recorded`)."""
        sample, _ = await self.send_recorded(
            client, spec, label=label, new_connection=new_connection, timeline=timeline, base_url=base_url
        )
        return sample

    async def send_recorded(
        self,
        client: Client,
        spec: RequestSpec,
        *,
        label: str,
        new_connection: bool = False,
        timeline: Timeline | None = None,
        base_url: str | None = None,
    ) -> tuple[RequestSample, Timeline]:
        """Send one request, join the server's signals into its timeline, and return its sample and the timeline
        (for an experiment that reads what a sample does not keep: response headers, the generated text).
        ``base_url`` sends it elsewhere than the target (the ``--direct`` upstream).

        A request that went to a kept-alive connection the server had closed is sent once more on a new connection:
        by the client when nothing of a response had arrived (:func:`~latscope.wire.client.closed_before_reply`),
        and here also when only the head had: the sample is the retry's, marked ``stale_retry``. Servers close after
        some responses without saying so — uvicorn after an unhandled exception: llama-cpp-python's 500 for a body
        that is not JSON, its empty stream for a prompt over the context — and the next request on that connection
        races the close (measured: it fails before the response head, or gets a ``200`` head and then the close).
        Nothing of it was delivered, and the experiments' requests are free of side effects, so repeating it costs
        only time.
        """
        url = base_url or self.base_url
        t = await client.request(spec, url, label=label, new_connection=new_connection, timeline=timeline)
        self.requests_sent += 1 + (t.stale_retry_error is not None)
        stale = t.stale_retry_error is not None
        if is_stale_connection_failure(t):
            stale = True
            t = await client.request(spec, url, label=label, new_connection=True)
            self.requests_sent += 1
        join_server_signals(t)
        self._note_rate_limit(t, label)
        if self.timelines is not None:
            self.timelines.append(t)
        self._done += 1
        self._emit(ProgressEvent("request", self.experiment, self._done, self._planned, label))
        sample = RequestSample.from_timeline(t, label)
        return (dataclasses.replace(sample, stale_retry=True) if stale else sample), t

    def _note_rate_limit(self, t: Timeline, label: str) -> None:
        """Keep ``t``'s rate-limit headers: a refusal in :attr:`rate_limited`, an answer's quota in :attr:`quota`."""
        state = rate_limit_state(t.response_headers, time.time())
        if state.empty and t.status != 429:  # a bare 429 is a refusal all the same
            return
        answer = RateLimitAnswer(self.experiment, label, t.status, state)
        if answer.refused:
            self.rate_limited.append(answer)
        elif t.status is not None and 200 <= t.status < 300:
            self.quota = answer

    async def send_series(
        self,
        client: Client,
        count: int,
        prompt_tokens: int,
        max_tokens: int,
        label: str,
        *,
        new_connection: bool = False,
    ) -> list[RequestSample]:
        """``count`` requests one after another on ``client``, each a fresh :meth:`spec` of ``prompt_tokens`` and
        ``max_tokens`` tokens, labelled ``"{label} 1/{count}"`` …; their samples in order."""
        return [
            await self.send(
                client,
                self.spec(prompt_tokens, max_tokens),
                label=f"{label} {index + 1}/{count}",
                new_connection=new_connection,
            )
            for index in range(count)
        ]

    # -- progress -------------------------------------------------------------------------------------------------

    def begin(self, experiment: str, planned_requests: int) -> None:
        """An experiment starts; ``planned_requests`` is what progress counts towards."""
        self.experiment = experiment
        self._planned = max(1, planned_requests)
        self._done = 0
        self._emit(ProgressEvent("experiment", experiment, 0, self._planned))

    def finish(self, message: str) -> None:
        """The current experiment ended (``message`` says how)."""
        self._emit(ProgressEvent("done", self.experiment, self._done, max(self._planned, self._done), message))

    def _emit(self, event: ProgressEvent) -> None:
        if self.progress is not None:
            try:
                self.progress(event)
            except Exception:  # a display problem must never end a diagnosis
                self.progress = None


def is_stale_connection_failure(t: Timeline) -> bool:
    """True when ``t`` failed on a reused connection that the server closed before delivering any of the response
    but its head (the client already sent again one that had not even the head)."""
    error = closed_under_reuse(t)
    return (
        error is not None
        and t.stale_retry_error is None
        and error.phase in (Phase.HEADERS, Phase.STREAM)
        and not t.events
    )
