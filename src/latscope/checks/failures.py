"""Why an experiment's requests failed, in one sentence a "not tested" outcome can carry.

Failures are grouped by cause so a misbehaving target reads as "4 of 9 requests failed: HTTP 429 rate limited (3),
connection reset by peer (1)", never as a list of tracebacks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from latscope.checks.samples import RequestSample
from latscope.timeline.model import ErrorKind

#: How much of one error message a summary quotes.
MESSAGE_CHARS = 120


def describe(sample: RequestSample) -> str:
    """A short cause for one failed request: "HTTP 429 (rate limited)", "stream: connection reset by peer"…"""
    if sample.status == 429:
        return "HTTP 429 (rate limited)"
    if sample.error_kind == ErrorKind.EMPTY and sample.refused:
        return f"HTTP {sample.status} with a stream that carried no token (the server refused the prompt)"
    if sample.error_kind is ErrorKind.HTTP_STATUS and sample.status is not None:
        message = sample.error_message or f"HTTP {sample.status}"
        return message[:MESSAGE_CHARS]
    phase = sample.error_phase or "request"
    message = (sample.error_message or sample.error_kind or "failed")[:MESSAGE_CHARS]
    return f"{phase}: {message}"


def summarise(samples: Iterable[RequestSample], total: int | None = None) -> str | None:
    """ "N of M requests failed: cause (count), …" for the failed ``samples``; None when none failed."""
    failed = [s for s in samples if not s.ok]
    if not failed:
        return None
    counts = Counter(describe(s) for s in failed)
    causes = ", ".join(f"{cause} ({n})" if n > 1 else cause for cause, n in counts.most_common())
    if total is not None:
        return f"{len(failed)} of {total} requests failed: {causes}"
    return f"{len(failed)} request{'s' if len(failed) != 1 else ''} failed: {causes}"


def rate_limited(samples: Iterable[RequestSample]) -> bool:
    """True when any request was refused with 429."""
    return any(s.status == 429 for s in samples)


#: An experiment whose requests failed more often than this no longer measures what it was built to: a check says
#: "not tested" rather than decide on the survivors (which a rate limiter or a failing backend has selected).
MAX_FAILED_SHARE = 0.25


def too_many_failed(samples: Iterable[RequestSample], ok_elsewhere: int = 0) -> str | None:
    """The failure summary when more than :data:`MAX_FAILED_SHARE` of the requests failed, else None.

    ``ok_elsewhere`` counts completed requests that are not in ``samples`` (evidence that keeps only their numbers).
    """
    listed = list(samples)
    failed = [s for s in listed if not s.ok]
    total = len(listed) + ok_elsewhere
    if not failed or total == 0 or len(failed) / total <= MAX_FAILED_SHARE:
        return None
    return summarise(failed, total)
