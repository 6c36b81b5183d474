"""What a diagnosis says: findings, honest non-results, and the catalogue of finding ids.

A check is a pure function from evidence to exactly one outcome:

- :class:`Finding` — the bottleneck is there: its measured cost, the evidence and the rule it crossed, the fix;
- :class:`NotTested` — the experiment could not run (no TLS, the server rejected the padding field, errors…);
- :class:`Inconclusive` — it ran, but the numbers cannot decide (noise too high): says what would settle it;
- :class:`Clear` — it ran and the bottleneck is absent (kept so a report can say what was ruled out, and why).

Finding ids are stable and machine-readable (``diagnose --json`` emits them): add new ones, never rename. The catalogue
below mirrors the project's bottleneck reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    """How much a finding matters, from its cost relative to the request it slows."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def rank(self) -> int:
        """2 for high, 1 for medium, 0 for low (for sorting and "above low" tests)."""
        return {"high": 2, "medium": 1, "low": 0}[self.value]


class Confidence(StrEnum):
    """How sure the check is, from the strength of the evidence against its control."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    """One finding id of the catalogue: where on the path it lives, its title and the fix to suggest."""

    id: str
    title: str
    where: str
    fix: str


CATALOGUE: dict[str, CatalogueEntry] = {
    e.id: e
    for e in (
        CatalogueEntry(
            "no-connection-reuse",
            "Connections are not reused",
            "server/proxy keep-alive",
            "Enable HTTP keep-alive with an idle timeout longer than the client's gap between requests, "
            "and share one connection pool across the client's requests.",
        ),
        CatalogueEntry(
            "tls-no-resumption",
            "TLS sessions are not resumed",
            "TLS terminator",
            "Enable TLS session tickets or a session cache on the TLS terminator "
            "(nginx: ssl_session_tickets on; ssl_session_cache shared:SSL:10m).",
        ),
        CatalogueEntry(
            "http2-not-negotiated",
            "HTTP/2 is not negotiated",
            "TLS terminator",
            "Enable HTTP/2 (ALPN h2) on the TLS listener so concurrent streams share one connection.",
        ),
        CatalogueEntry(
            "slow-request-parsing",
            "Request parsing is slow",
            "gateway/API server",
            "Parse with a fast JSON library (orjson/msgspec), validate once, and avoid regex scans over "
            "whole request bodies; parse large fields lazily.",
        ),
        CatalogueEntry(
            "queue-head-of-line",
            "Long prompts block short ones (head-of-line queueing)",
            "scheduler",
            "Schedule shortest-prompt-first or by deadline and enable chunked prefill so a long prefill "
            "cannot hold the whole queue.",
        ),
        CatalogueEntry(
            "stream-coalescing-nagle",
            "Streamed tokens are held back by Nagle's algorithm",
            "TCP of the server or proxy",
            "Set TCP_NODELAY on the streaming socket (nginx: tcp_nodelay on) and write each event in one write.",
        ),
        CatalogueEntry(
            "stream-proxy-buffering",
            "A buffering proxy holds the stream",
            "reverse proxy",
            "Turn proxy buffering off for streaming routes (nginx: proxy_buffering off) or have the origin "
            "send 'X-Accel-Buffering: no'.",
        ),
        CatalogueEntry("slow-dns", "DNS resolution is slow", "resolver", "Cache DNS answers and reuse connections."),
        CatalogueEntry(
            "request-header-bloat",
            "Request headers are bloated",
            "client/edge",
            "Send smaller credentials (reference tokens) and trim cookies. Never truncate a signed token: "
            "it breaks authentication.",
        ),
        CatalogueEntry(
            "response-cached",
            "Responses come from a cache",
            "CDN/edge",
            "Bypass caching on prompt routes and add Vary on the headers that change the answer.",
        ),
        CatalogueEntry(
            "trace-context-dropped",
            "Trace context is dropped",
            "edge/gateway",
            "Propagate W3C trace context (traceparent) at the edge.",
        ),
        CatalogueEntry(
            "rate-limited",
            "Requests are rate limited",
            "gateway",
            "Raise the limit or spread load; honour Retry-After with jitter.",
        ),
        CatalogueEntry(
            "gateway-queueing",
            "The gateway queues requests",
            "gateway",
            "Size the limiter to the backend and reject early with Retry-After instead of queueing.",
        ),
        CatalogueEntry(
            "gateway-overhead",
            "The gateway adds overhead",
            "gateway / protocol conversion",
            "Remove hops; keep one binary protocol end to end.",
        ),
        CatalogueEntry(
            "batching-window",
            "A batching window delays every request",
            "dynamic batcher",
            "Trigger batches on readiness, shorten the window, or use continuous batching.",
        ),
        CatalogueEntry(
            "capacity-saturation",
            "The server is saturated",
            "scheduler",
            "Scale out or add admission control.",
        ),
        CatalogueEntry(
            "prefill-superlinear",
            "Prefill time grows faster than the prompt",
            "engine",
            "Use an efficient attention kernel (FlashAttention) and chunked prefill.",
        ),
        CatalogueEntry(
            "prefix-cache-miss",
            "A shared prompt prefix is computed anew on every request",
            "engine",
            "Enable prefix caching, and route a session to the replica that holds its prefix.",
        ),
        CatalogueEntry(
            "kv-cache-pressure",
            "The KV cache is under pressure",
            "engine",
            "Give the KV cache more memory, lower the max batch, or use paged allocation.",
        ),
        CatalogueEntry(
            "decode-host-overhead",
            "Each decode step pays a large host-side constant",
            "engine",
            "Move sampling to the device and capture decode steps in CUDA graphs.",
        ),
        CatalogueEntry(
            "multimodal-preprocessing",
            "Image preprocessing delays the first token",
            "gateway/preprocessor",
            "Decode and resize images once, off the request path (a preprocessing pool, a cache keyed on the "
            "image); accept image URLs or pre-processed tensors; bound image size on the client.",
        ),
        CatalogueEntry(
            "retry-amplification",
            "Retries amplify latency",
            "client/gateway",
            "Back off exponentially with jitter, honour Retry-After, and send Idempotency-Key on retries.",
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Finding:
    """A bottleneck that this run measured.

    ``cost_ms`` is what the bottleneck costs, in milliseconds, per the unit ``cost_basis`` names (e.g.
    "ms per request on a new connection", "ms added to a short request's TTFT at p50"). ``evidence`` holds the numbers
    from this run (all durations in ms, keys say their unit) and ``rule`` the threshold they crossed.
    """

    id: str
    title: str
    severity: Severity
    cost_ms: float
    cost_basis: str
    evidence: dict[str, Any]
    rule: str
    confidence: Confidence
    fix: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``latscope.diagnosis/1`` finding)."""
        return {
            "id": self.id,
            "title": self.title,
            "severity": str(self.severity),
            "cost_ms": round(self.cost_ms, 3),
            "cost_basis": self.cost_basis,
            "evidence": self.evidence,
            "rule": self.rule,
            "confidence": str(self.confidence),
            "fix": self.fix,
        }


@dataclass(frozen=True, slots=True)
class NotTested:
    """The experiment behind check ``id`` could not run; ``reason`` says why."""

    id: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class _Measured:
    """An outcome of an experiment that ran: why it decided as it did, and the numbers (the evidence)."""

    id: str
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "reason": self.reason, "evidence": self.evidence}


@dataclass(frozen=True, slots=True)
class Inconclusive(_Measured):
    """The experiment ran but cannot decide; ``reason`` says why and what would settle it."""


@dataclass(frozen=True, slots=True)
class Clear(_Measured):
    """The experiment ran and ruled the bottleneck out; ``reason`` gives the numbers that did."""


Outcome = Finding | NotTested | Inconclusive | Clear


def make_finding(
    finding_id: str,
    *,
    severity: Severity,
    cost_ms: float,
    cost_basis: str,
    evidence: dict[str, Any],
    rule: str,
    confidence: Confidence,
    title: str | None = None,
    fix: str | None = None,
) -> Finding:
    """A :class:`Finding` whose title and fix default to the catalogue's (``finding_id`` must be catalogued)."""
    entry = CATALOGUE[finding_id]
    return Finding(
        id=finding_id,
        title=title or entry.title,
        severity=severity,
        cost_ms=cost_ms,
        cost_basis=cost_basis,
        evidence=evidence,
        rule=rule,
        confidence=confidence,
        fix=fix or entry.fix,
    )


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Findings ordered by severity, then by measured cost (largest first)."""
    return sorted(findings, key=lambda f: (-f.severity.rank, -f.cost_ms))
