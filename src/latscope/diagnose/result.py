"""A diagnosis: what was measured about the target, and one outcome per finding id checked.

Its JSON form is the ``latscope.diagnosis/1`` contract::

    {
      "schema": "latscope.diagnosis/1",
      "target": {"url", "model", "http_version", "alpn", "tls", "tls_version", "server", "remote_address",
                 "rtt_ms"},
      "timeline_summary": {"requests", "phases_ms": {dns, connect, tls, send, wait, first_token, stream},
                           "cold_request_phases_ms", "ttfb_ms", "ttft_ms", "e2e_ms", "itl_ms_p50", "itl_ms_p95",
                           "tpot_ms", "server_phases_ms", ...},
      "baseline": {"sweep": [{"prompt_tokens", "ttft_ms"}], "prefill_ms_per_1k_tokens", ...},
      "findings": [{"id", "title", "severity", "cost_ms", "cost_basis", "evidence", "rule", "confidence", "fix"}],
      "not_tested": [{"id", "reason"}],
      "inconclusive": [{"id", "reason", "evidence"}],
      "clear": [{"id", "reason", "evidence"}],
      "experiments": [{"name", "status", "requests", "duration_s", "message"}],
      "duration_s": ..., "quick": ..., "checked": [ids]
    }

Findings are ranked by severity, then cost. Durations are ms unless the key ends in ``_s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from latscope.findings import Clear, Finding, Inconclusive, NotTested, Outcome, rank_findings
from latscope.timeline.model import Timeline

SCHEMA = "latscope.diagnosis/1"


@dataclass(frozen=True, slots=True)
class ExperimentRun:
    """How one experiment went: ``status`` is "ok", "failed" (it raised: ``message`` says why) or "timeout"."""

    name: str
    status: str
    requests: int
    duration_s: float
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "requests": self.requests,
            "duration_s": round(self.duration_s, 3),
            "message": self.message,
        }


@dataclass
class Diagnosis:
    """The result of :func:`latscope.diagnose.diagnose`."""

    target: dict[str, Any]
    timeline_summary: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)
    experiments: list[ExperimentRun] = field(default_factory=list)
    duration_s: float = 0.0
    quick: bool = False
    checked: tuple[str, ...] = ()
    #: Ctrl-C (or a cancellation) stopped the diagnosis: the experiments after the one running did not run
    interrupted: bool = False
    #: every experiment request's timeline, in the order sent, when asked for (``keep_timelines``); not in the JSON
    timelines: list[Timeline] = field(default_factory=list)
    #: with ``server_spans``: how many requests were joined to the server's own spans, and where they were received
    server_spans: str | None = None

    @property
    def diagnosed(self) -> bool:
        """True when at least one check reached a verdict (finding, clear or inconclusive); False when every one is
        "not tested" — no experiment could measure (every request refused, reset, timed out)."""
        return any(not isinstance(o, NotTested) for o in self.outcomes)

    @property
    def findings(self) -> list[Finding]:
        """Findings, most severe and costly first."""
        return rank_findings([o for o in self.outcomes if isinstance(o, Finding)])

    @property
    def not_tested(self) -> list[NotTested]:
        return [o for o in self.outcomes if isinstance(o, NotTested)]

    @property
    def inconclusive(self) -> list[Inconclusive]:
        return [o for o in self.outcomes if isinstance(o, Inconclusive)]

    @property
    def clear(self) -> list[Clear]:
        return [o for o in self.outcomes if isinstance(o, Clear)]

    def outcome(self, finding_id: str) -> Outcome | None:
        """The outcome for ``finding_id``, or None when it was not checked."""
        return next((o for o in self.outcomes if o.id == finding_id), None)

    def finding(self, finding_id: str) -> Finding | None:
        """The finding for ``finding_id``, or None when it was not found."""
        outcome = self.outcome(finding_id)
        return outcome if isinstance(outcome, Finding) else None

    def to_dict(self) -> dict[str, Any]:
        """The ``latscope.diagnosis/1`` JSON object (see the module docstring); ``server_spans`` only when a receiver
        ran."""
        extra = {} if self.server_spans is None else {"server_spans": self.server_spans}
        return {
            "schema": SCHEMA,
            "target": self.target,
            "timeline_summary": self.timeline_summary,
            "baseline": self.baseline,
            "findings": [f.to_dict() for f in self.findings],
            "not_tested": [o.to_dict() for o in self.not_tested],
            "inconclusive": [o.to_dict() for o in self.inconclusive],
            "clear": [o.to_dict() for o in self.clear],
            "experiments": [e.to_dict() for e in self.experiments],
            "duration_s": round(self.duration_s, 3),
            "quick": self.quick,
            "checked": list(self.checked),
            "interrupted": self.interrupted,
            "diagnosed": self.diagnosed,
            **extra,
        }
