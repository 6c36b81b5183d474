"""The configuration of a bench run: target, workload, steps (a sweep), bounds, warm-up, workers, SLO.

:class:`BenchConfig` is plain data. It round-trips through :meth:`BenchConfig.to_dict` (what ``run.json`` stores and
what worker processes receive); request headers are not part of that dict because they usually hold an API key —
workers get them separately and ``run.json`` shows only their redacted form.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from latscope.load.arrivals import Arrival, ClosedLoop, OpenLoop, arrival_from_dict
from latscope.load.health import available_cores
from latscope.load.slo import Slo
from latscope.load.workload import Workload
from latscope.timeline.redact import redact_url
from latscope.wire.models import Timeouts
from latscope.wire.retry import DEFAULT_BACKOFF_S, DEFAULT_MAX_WAIT_S, RetryPolicy
from latscope.wire.target import Target

#: Without any bound a step stops after this many measured requests.
DEFAULT_REQUESTS = 100

#: Concurrent streams one uvloop worker handles while keeping its read stamps within ~1 ms (benchmarks/concurrency.py
#: measures this; the value is conservative for a typical core).
STREAMS_PER_WORKER = 2_500

#: Open-loop arrivals per second one worker dispatches on schedule with short streams (benchmarks/pacing.py).
RATE_PER_WORKER = 2_000.0


class BenchConfigError(ValueError):
    """The bench configuration is inconsistent; the message names the option."""


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Everything a bench run needs. Durations in seconds.

    ``requests`` is the number of *measured* requests per step; ``warmup_requests`` / ``warmup_s`` come on top and
    are excluded from the results. ``duration_s`` bounds the measured part of a step in time (with ``requests`` both
    bounds apply, whichever is hit first). ``drain_s`` limits how long requests still in flight when a step's
    dispatching ends may run on (None: until they finish or hit the client's timeouts); the ones cut off are
    recorded as errors of kind "cancelled". ``workers`` None picks a count from the load and the cores.
    """

    target: Target  #: where the requests go and how (URL, dialect, headers, TLS, timeouts, stamps, protocols)
    steps: tuple[Arrival, ...]
    workload: Workload
    model: str | None = None
    requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    warmup_s: float = 0.0
    drain_s: float | None = None
    workers: int | None = None
    slo: Slo | None = None
    temperature: float | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    new_connection_per_request: bool = False
    spin_us: int = 1500  #: the pacing spin before each arrival (latscope.load.pacing), µs; 0 disables it
    busy_poll: bool = False  #: keep the event loop polling instead of sleeping (one core per worker, lower latency)
    server_metrics: bool = True  #: scrape the target's /metrics gauges every second during the run
    #: send a logical request again up to this many times after a refusal or a lost connection
    #: (:mod:`latscope.wire.retry`); 0 never retries
    retries: int = 0
    retry_backoff_s: float = DEFAULT_BACKOFF_S  #: the first retry's backoff ceiling (full jitter below it), s
    retry_max_wait_s: float = DEFAULT_MAX_WAIT_S  #: a longer Retry-After ends the logical request instead, s
    idempotency_keys: bool = False  #: one ``Idempotency-Key`` (a fresh UUID4) per logical request, on every attempt

    def __post_init__(self) -> None:
        if not self.steps:
            raise BenchConfigError("at least one step (a concurrency or a rate) is needed")
        if self.target.http3:
            raise BenchConfigError("bench speaks HTTP/1.1 and HTTP/2; HTTP/3 is for probe")
        if self.requests is not None and self.requests < 1:
            raise BenchConfigError(f"--requests must be >= 1, got {self.requests}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise BenchConfigError(f"--duration must be > 0 s, got {self.duration_s}")
        if self.warmup_requests < 0 or self.warmup_s < 0:
            raise BenchConfigError("--warmup must be >= 0")
        if self.workers is not None and self.workers < 1:
            raise BenchConfigError(f"--workers must be >= 1, got {self.workers}")
        if self.spin_us < 0:
            raise BenchConfigError("--spin-us must be >= 0")
        if self.drain_s is not None and self.drain_s < 0:
            raise BenchConfigError("--drain must be >= 0 s")
        if self.retries < 0:
            raise BenchConfigError(f"--retries must be >= 0, got {self.retries}")
        if not self.retry_backoff_s >= 0 or not self.retry_max_wait_s >= 0:
            raise BenchConfigError("--retry-backoff and --retry-max-wait must be >= 0 s")

    @property
    def retry_policy(self) -> RetryPolicy:
        """How each logical request is retried (:mod:`latscope.wire.retry`)."""
        return RetryPolicy(
            retries=self.retries,
            backoff_s=self.retry_backoff_s,
            max_wait_s=self.retry_max_wait_s,
            idempotency_keys=self.idempotency_keys,
        )

    @property
    def measured_requests(self) -> int | None:
        """The request bound of a step: ``requests``, or :data:`DEFAULT_REQUESTS` when no bound was given."""
        if self.requests is None and self.duration_s is None:
            return DEFAULT_REQUESTS
        return self.requests

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form without secrets: ``target`` is :meth:`~latscope.wire.target.Target.to_dict` (headers
        redacted); ``url``, ``dialect`` and ``api`` (the older key: ``chat`` or ``completions`` for the OpenAI
        dialects) repeat what a reader of a run asks first."""
        return {
            "url": redact_url(self.target.base_url),
            "model": self.model,
            "dialect": self.target.dialect.name,
            "api": self.target.dialect.mode,
            "target": self.target.to_dict(),
            "steps": [a.to_dict() for a in self.steps],
            "workload": self.workload.to_dict(),
            "requests": self.requests,
            "duration_s": self.duration_s,
            "warmup_requests": self.warmup_requests,
            "warmup_s": self.warmup_s,
            "drain_s": self.drain_s,
            "workers": self.workers,
            "slo": None if self.slo is None else self.slo.to_dict(),
            "temperature": self.temperature,
            "extra_body": self.extra_body,
            "new_connection_per_request": self.new_connection_per_request,
            "spin_us": self.spin_us,
            "busy_poll": self.busy_poll,
            "server_metrics": self.server_metrics,
            "retries": self.retries,
            "retry_backoff_s": self.retry_backoff_s,
            "retry_max_wait_s": self.retry_max_wait_s,
            "idempotency_keys": self.idempotency_keys,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], headers: tuple[tuple[str, str], ...] = ()) -> BenchConfig:
        """Inverse of :meth:`to_dict`: the target at ``data["url"]`` (stored redacted; a worker is handed the real
        one there) with ``headers`` in place of the redacted ones. Runs saved before the target was one object keep
        its settings as flat keys, read here too."""
        slo = data.get("slo")
        return cls(
            target=Target.from_dict(data.get("target") or _flat_target(data), url=data["url"], headers=headers),
            steps=tuple(arrival_from_dict(a) for a in data["steps"]),
            workload=Workload.from_dict(data["workload"]),
            model=data.get("model"),
            requests=data.get("requests"),
            duration_s=data.get("duration_s"),
            warmup_requests=int(data.get("warmup_requests", 0)),
            warmup_s=float(data.get("warmup_s", 0.0)),
            drain_s=data.get("drain_s"),
            workers=data.get("workers"),
            slo=None if slo is None else Slo.from_dict(slo),
            temperature=data.get("temperature"),
            extra_body=dict(data.get("extra_body") or {}),
            new_connection_per_request=bool(data.get("new_connection_per_request", False)),
            spin_us=int(data.get("spin_us", 1500)),
            busy_poll=bool(data.get("busy_poll", False)),
            server_metrics=bool(data.get("server_metrics", True)),
            retries=int(data.get("retries", 0)),  # absent in runs saved before retries
            retry_backoff_s=float(data.get("retry_backoff_s", DEFAULT_BACKOFF_S)),
            retry_max_wait_s=float(data.get("retry_max_wait_s", DEFAULT_MAX_WAIT_S)),
            idempotency_keys=bool(data.get("idempotency_keys", False)),
        )


def _flat_target(data: dict[str, Any]) -> dict[str, Any]:
    """The ``target`` object of a run saved with the target's settings as flat keys of its config."""
    read_s = float(data.get("read_timeout_s", 120.0))
    return {
        "url": data["url"],
        "dialect": data.get("dialect") or f"openai.{data.get('api', 'chat')}",  # older still: "api" only
        "verify": data.get("verify", True),
        "ca_file": data.get("ca_file"),
        "timeouts": asdict(Timeouts(headers_s=read_s, read_s=read_s, total_s=data.get("total_timeout_s"))),
        "stamps": data.get("stamps", "user"),  # runs saved before kernel stamps used user-space ones
        "http2": data.get("http2", True),
        "trace_context": data.get("trace_context", False),
    }


def target_is_local(url: str) -> bool:
    """True when the URL's host is a loopback address or ``localhost`` (the target then competes for our cores)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def auto_workers(arrival: Arrival, url: str, cores: int | None = None) -> int:
    """Worker processes for one step: enough for the load (:data:`STREAMS_PER_WORKER` streams or
    :data:`RATE_PER_WORKER` arrivals/s each), at most the cores — minus one when the target runs on this machine,
    so client and server do not fight over the same core. One worker whenever one suffices: a single event loop has
    no cross-process start skew."""
    n_cores = cores if cores is not None else available_cores()
    if isinstance(arrival, ClosedLoop):
        need = math.ceil(arrival.concurrency / STREAMS_PER_WORKER)
    else:
        assert isinstance(arrival, OpenLoop)
        need = math.ceil(arrival.rate_rps / RATE_PER_WORKER)
        if arrival.max_concurrency is not None:
            need = max(need, math.ceil(arrival.max_concurrency / STREAMS_PER_WORKER))
    limit = n_cores - 1 if target_is_local(url) else n_cores
    return max(1, min(need, max(1, limit)))


def split_evenly(total: int, worker: int, workers: int) -> int:
    """Worker ``worker``'s share of ``total`` when split as evenly as possible (the first ones get the remainder)."""
    base, extra = divmod(total, workers)
    return base + (1 if worker < extra else 0)


_DURATION_UNITS_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration_s(text: str) -> float:
    """``"90"`` / ``"90s"`` → 90.0, ``"2m"`` → 120.0, ``"500ms"`` → 0.5, ``"1h"`` → 3600.0 (bare numbers are s)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|m|h)?\s*", text.lower())
    if match is None:
        raise BenchConfigError(f"cannot read duration {text!r}; write e.g. 60, 60s, 2m or 500ms")
    value, unit = match.groups()
    return float(value) * _DURATION_UNITS_S[unit or "s"]


def parse_warmup(text: str) -> tuple[int, float]:
    """``--warmup``: a bare integer is a number of requests, a duration with a unit is time: ``(requests, seconds)``."""
    stripped = text.strip()
    if re.fullmatch(r"\d+", stripped):
        return int(stripped), 0.0
    return 0, parse_duration_s(stripped)
