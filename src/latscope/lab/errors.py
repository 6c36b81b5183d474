"""OpenAI-style error responses: ``{"error": {"message", "type", "param", "code"}}`` with an HTTP status.

The shapes follow what api.openai.com sends (400 ``invalid_request_error`` for bad input, 401 ``invalid_api_key``,
404 ``model_not_found``), so a client's error handling is exercised the way it would be against the real service.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

import orjson


@dataclass(eq=False)
class ErrorResponse(Exception):
    """A request the lab refuses; raised anywhere in the gateway and turned into one JSON response.

    ``status`` is the HTTP status code; ``message``, ``type``, ``param`` and ``code`` are the fields of the error
    object; ``headers`` are extra response headers (``WWW-Authenticate`` for 401).
    """

    status: int
    message: str
    _: KW_ONLY
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def body(self) -> bytes:
        """The JSON body (UTF-8)."""
        return orjson.dumps(
            {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        )


def invalid_request(message: str, *, param: str | None = None, code: str | None = None) -> ErrorResponse:
    """400: the body is not a request the API accepts."""
    return ErrorResponse(400, message, param=param, code=code)


def model_not_found(model: str) -> ErrorResponse:
    """404 for a model the lab does not serve, worded like OpenAI's."""
    return ErrorResponse(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )


def unauthorized(provided: bool) -> ErrorResponse:
    """401 for a missing or wrong ``Authorization: Bearer`` key."""
    message = (
        "Incorrect API key provided."
        if provided
        else "You didn't provide an API key. Send it in the Authorization header as 'Bearer KEY'."
    )
    return ErrorResponse(
        401,
        message,
        code="invalid_api_key" if provided else None,
        headers=((b"www-authenticate", b'Bearer realm="latscope-lab"'),),
    )


def rate_limit_exceeded(retry_after_s: float, headers: tuple[tuple[bytes, bytes], ...]) -> ErrorResponse:
    """429 for a request beyond the gateway's rate limit, worded like OpenAI's; ``headers`` carry Retry-After and
    the limit state."""
    return ErrorResponse(
        429,
        f"Rate limit reached for requests on this API key. Please try again in {retry_after_s * 1000:.0f}ms.",
        type="requests",
        code="rate_limit_exceeded",
        headers=headers,
    )


def circuit_open(retry_after: bytes) -> ErrorResponse:
    """503 while the gateway's circuit breaker keeps requests away from a failing upstream; ``retry_after`` is the
    ``Retry-After`` value (whole seconds) until it tries the upstream again."""
    return ErrorResponse(
        503,
        f"The upstream is failing and the gateway's circuit breaker is open: try again in {retry_after.decode()} s.",
        type="server_error",
        code="circuit_open",
        headers=((b"retry-after", retry_after),),
    )


def payload_too_large(limit_bytes: int) -> ErrorResponse:
    """413: the body is larger than the configured limit."""
    return ErrorResponse(413, f"Request body exceeds the limit of {limit_bytes} bytes.", code="request_too_large")


def not_found(path: str) -> ErrorResponse:
    """404 for a path the lab does not route."""
    return ErrorResponse(404, f"Unknown request URL: {path}.", code="unknown_url")


def method_not_allowed(method: str, path: str) -> ErrorResponse:
    """405 for a known path with the wrong method."""
    return ErrorResponse(405, f"Method {method} is not allowed on {path}.", code="method_not_allowed")
