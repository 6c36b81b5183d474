"""The server's own id for a request, so that a finding can point at the server's logs.

Headers, in the order they are preferred: ``x-request-id`` (OpenAI and most gateways), ``request-id`` (Anthropic),
``x-amzn-requestid`` (AWS API Gateway REST APIs, Lambda, Bedrock), ``apigw-requestid`` (API Gateway HTTP APIs),
``x-amz-request-id`` (S3-style services), ``x-ms-request-id`` (Azure), ``x-correlation-id``,
``x-cloud-trace-context`` (Google Cloud), ``cf-ray`` (Cloudflare edge).
"""

from __future__ import annotations

from dataclasses import dataclass

from latscope.signals.headers import HeaderInput, header_pairs

REQUEST_ID_HEADERS = (
    "x-request-id",
    "request-id",
    "x-amzn-requestid",
    "apigw-requestid",
    "x-amz-request-id",
    "x-ms-request-id",
    "x-correlation-id",
    "x-cloud-trace-context",
    "cf-ray",
)


@dataclass(frozen=True, slots=True)
class RequestId:
    """A request id and the header it came from."""

    header: str
    value: str


def request_ids(headers: HeaderInput) -> list[RequestId]:
    """Every non-empty request id in the headers, in the preference order of ``REQUEST_ID_HEADERS``."""
    found = {name: value for name, value in reversed(header_pairs(headers)) if value and name in REQUEST_ID_HEADERS}
    return [RequestId(name, found[name]) for name in REQUEST_ID_HEADERS if name in found]


def request_id(headers: HeaderInput) -> RequestId | None:
    """The preferred request id, or None."""
    ids = request_ids(headers)
    return ids[0] if ids else None
