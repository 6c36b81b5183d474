"""The gateway stage: authentication, body parsing, validation, prompt token counting and rate limiting.

Two parsing paths, chosen by the ``slow-parse`` fault:

- tuned: ``orjson.loads`` and one validation pass over the fields the API defines; nothing else is looked at
  (a ``user`` string of any length costs its memcpy and nothing more);
- naive (``slow-parse``): :mod:`latscope.lab.slowparse` — stdlib ``json``, a whole-document walk with a regex
  safety filter over every string, an audit re-serialisation.

Both measure what they spend: ``parse_ns`` (bytes → document) and ``validate_ns`` (document → accepted request,
prompt tokenisation included), reported in ``Server-Timing`` and the ``latscope`` object of the final chunk.
The rate limiter (:mod:`latscope.lab.ratelimit`, off unless configured or a ``rate-limit`` / ``gateway-queue``
fault is on) runs after validation, when the request's tokens are known, and before the scheduler: it refuses (429)
or holds the request. Validation errors follow OpenAI's shapes: 400 ``invalid_request_error`` with ``param`` and
``code``, 404 ``model_not_found``, 401 ``invalid_api_key``; a rate limiter's refusal, 429 ``rate_limit_exceeded``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from latscope.lab import tokenizer
from latscope.lab.apis import ApiFields, ErrorStyle, read_messages, read_ollama, read_responses, read_tgi
from latscope.lab.costmodel import LOGPROBS, NUCLEUS, PENALTIES
from latscope.lab.errors import ErrorResponse, invalid_request, model_not_found, rate_limit_exceeded, unauthorized
from latscope.lab.images import DEFAULT_MS_PER_MB, IMAGE_TOKENS, ImageError, decode_image
from latscope.lab.prefixcache import prompt_blocks
from latscope.lab.ratelimit import RateLimitConfig, RateLimiter, key_digest, limit_headers
from latscope.lab.slowparse import naive_inspect, naive_parse

#: max_tokens when the request names none. Chat: OpenAI generates up to the context limit; the lab stops earlier so an
#: omitted limit cannot tie the simulated engine up for minutes (256 tokens ≈ 3 s with the default cost model).
DEFAULT_MAX_TOKENS_CHAT = 256
#: The legacy completions API's documented default.
DEFAULT_MAX_TOKENS_COMPLETIONS = 16

#: Integer fields (``seed``, ``n``) are 64-bit, as in OpenAI's API.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

#: Bytes per MB (the unit image preprocessing is priced in).
MB = 1024 * 1024

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class Endpoint(StrEnum):
    """Which generation API a request came through."""

    CHAT = "chat.completions"  #: POST /v1/chat/completions
    COMPLETIONS = "completions"  #: POST /v1/completions
    RESPONSES = "responses"  #: POST /v1/responses (OpenAI Responses)
    MESSAGES = "messages"  #: POST /v1/messages (Anthropic Messages)
    TGI_STREAM = "generate_stream"  #: POST /generate_stream (TGI native, streamed)
    TGI_GENERATE = "generate"  #: POST /generate (TGI native, one answer)
    TGI_COMPAT = "compat_generate"  #: POST / (TGI native; the body's ``stream`` decides; what its client calls)
    OLLAMA_CHAT = "api.chat"  #: POST /api/chat (Ollama native, NDJSON)
    OLLAMA_GENERATE = "api.generate"  #: POST /api/generate (Ollama native, NDJSON)

    @property
    def error_style(self) -> ErrorStyle:
        """The shape this API gives its errors."""
        return _ERROR_STYLES.get(self, ErrorStyle.OPENAI)


_ERROR_STYLES = {
    Endpoint.MESSAGES: ErrorStyle.ANTHROPIC,
    Endpoint.TGI_STREAM: ErrorStyle.TGI,
    Endpoint.TGI_GENERATE: ErrorStyle.TGI,
    Endpoint.TGI_COMPAT: ErrorStyle.TGI,
    Endpoint.OLLAMA_CHAT: ErrorStyle.OLLAMA,
    Endpoint.OLLAMA_GENERATE: ErrorStyle.OLLAMA,
}


def _read_api(endpoint: Endpoint, document: Mapping[str, Any]) -> ApiFields:
    """The fields of a request of one of the APIs of :mod:`latscope.lab.apis`."""
    if endpoint is Endpoint.RESPONSES:
        return read_responses(document)
    if endpoint is Endpoint.MESSAGES:
        return read_messages(document)
    if endpoint is Endpoint.TGI_STREAM or endpoint is Endpoint.TGI_GENERATE:
        return read_tgi(document, stream=endpoint is Endpoint.TGI_STREAM)
    if endpoint is Endpoint.TGI_COMPAT:
        return read_tgi(document, stream=document.get("stream") is True)
    return read_ollama(document, chat=endpoint is Endpoint.OLLAMA_CHAT)


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """An accepted generation request, with what the gateway spent on it."""

    endpoint: Endpoint
    model: str
    prompt_tokens: int  #: counted with the lab tokenizer (``user`` and other metadata are not tokenised)
    max_tokens: int
    stream: bool
    include_usage: bool  #: ``stream_options.include_usage``
    seed: int | None
    body_bytes: int
    sampled: frozenset[str]  #: the slower sampling paths it asks for (:func:`sampling_paths`), empty for greedy
    parse_ns: int  #: bytes → document
    validate_ns: int  #: document → this object (validation, safety filter on the naive path, tokenisation)
    #: the tool the answer calls (Anthropic ``tool_choice`` ``tool`` / ``any``, OpenAI chat ``tool_choice`` naming a
    #: function or ``required``): its generated tokens become the tool's input, streamed as ``input_json_delta`` /
    #: ``tool_calls[].function.arguments`` pieces; None for a text answer
    tool: str | None = None
    #: the first tokens that are thinking (Anthropic extended thinking: a thinking block, then the text); 0 for none
    thinking_tokens: int = 0
    #: OpenAI chat image parts accepted (:mod:`latscope.lab.images`), and their bytes (decoded from base64)
    images: int = 0
    image_bytes: int = 0
    #: decoding them (inside ``validate_ns``), and the preprocessing after it (:meth:`Gateway.preprocess`), ns
    image_decode_ns: int = 0
    preprocess_ns: int = 0
    #: the chained names of the prompt's full blocks, what the engine's prefix cache finds it by
    prefix_blocks: tuple[int, ...] = ()


def sampling_paths(document: Mapping[str, Any]) -> frozenset[str]:
    """The sampling the request asks for that engines run outside the fused decode step (:data:`SAMPLING_PATHS`):
    ``nucleus`` (top-p or top-k filtering), ``penalties`` (presence/frequency/repetition: a pass over every generated
    token), ``logprobs`` (a softmax and sort over the vocabulary). Greedy decoding and plain temperature take none."""
    top_p, top_k = document.get("top_p"), document.get("top_k")
    penalties = (document.get(n) for n in ("presence_penalty", "frequency_penalty"))
    repetition = document.get("repetition_penalty")
    asked = {
        NUCLEUS: (isinstance(top_p, int | float) and 0 < top_p < 1) or (isinstance(top_k, int | float) and top_k > 0),
        PENALTIES: any(isinstance(v, int | float) and v != 0 for v in penalties)
        or (isinstance(repetition, int | float) and repetition != 1),
        LOGPROBS: document.get("logprobs") not in (None, False, 0),
    }
    return frozenset(path for path, wanted in asked.items() if wanted)


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request the rate limiter let through: how long it was held (ms, 0 when it was not) and the rate-limit
    headers its response carries (empty without a limiter)."""

    wait_ms: float = 0.0
    headers: tuple[tuple[bytes, bytes], ...] = ()


class Gateway:
    """Authenticates, parses and rate-limits generation requests for one served model."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None,
        slow_parse: bool,
        max_context_tokens: int,
        rate_limit: RateLimitConfig | None = None,
        image_ms_per_mb: float = DEFAULT_MS_PER_MB,
    ) -> None:
        self.model = model
        self.slow_parse = slow_parse
        self.image_ms_per_mb = image_ms_per_mb
        self.max_context_tokens = max_context_tokens
        self._expected_auth = f"Bearer {api_key}".encode() if api_key is not None else None
        self.limiter = RateLimiter(rate_limit) if rate_limit is not None and rate_limit.enabled else None

    async def admit(self, credential: bytes | None, request: CompletionRequest) -> Admitted:
        """Pass ``request`` through the rate limiter of the key ``credential`` (the ``Authorization`` or
        ``x-api-key`` value; only its digest is kept): at once, after a wait in queue mode, or not at all (raises a
        429 :class:`ErrorResponse` with ``Retry-After`` and the limit headers)."""
        if self.limiter is None:
            return Admitted()
        tokens = request.prompt_tokens + request.max_tokens
        admission = self.limiter.admit(key_digest(credential), tokens, time.monotonic())
        headers = tuple(limit_headers(admission))
        if not admission.admitted:
            raise rate_limit_exceeded(admission.retry_after_s or 0.0, headers)
        if admission.wait_s > 0:
            await asyncio.sleep(admission.wait_s)
        return Admitted(admission.wait_s * 1000.0, headers)

    async def preprocess(self, request: CompletionRequest) -> CompletionRequest:
        """Preprocess ``request``'s images: the whole image stage (decoding, done in validation, then resizing,
        normalising, patching: simulated by a wait off the event loop's CPU) takes :attr:`image_ms_per_mb` per MB of
        image, or what decoding took when that was longer. The request with ``preprocess_ns`` set (the wait;
        unchanged without images)."""
        if not request.image_bytes:
            return request
        started = time.monotonic_ns()
        stage_ns = self.image_ms_per_mb * request.image_bytes / MB * 1e6
        await asyncio.sleep(max(0.0, stage_ns - request.image_decode_ns) / 1e9)
        return dataclasses.replace(request, preprocess_ns=time.monotonic_ns() - started)

    def authorize(self, authorization: bytes | None, api_key: bytes | None = None) -> None:
        """Check ``Authorization: Bearer KEY`` (or Anthropic's ``x-api-key: KEY``, given as ``api_key``) when the lab
        has a key; raise a 401 :class:`ErrorResponse` if wrong."""
        expected = self._expected_auth
        if expected is None:
            return
        if authorization is None and api_key is not None:
            authorization = b"Bearer " + api_key.strip()
        if authorization is None or not authorization.startswith(b"Bearer "):
            raise unauthorized(provided=False)
        if not hmac.compare_digest(authorization.strip(), expected):  # constant time: no key oracle
            raise unauthorized(provided=True)

    def parse(self, endpoint: Endpoint, body: bytes) -> CompletionRequest:
        """Parse and validate a request body; raise :class:`ErrorResponse` (400/404) when it is not acceptable."""
        if self.slow_parse:
            document, parse_ns = naive_parse(body)
            started = time.monotonic_ns()
            naive_inspect(document)
        else:
            started = time.monotonic_ns()
            try:
                document = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise invalid_request(f"We could not parse the JSON body of your request: {exc}.") from None
            parse_ns = time.monotonic_ns() - started
            started = time.monotonic_ns()
        fields = self._validate(endpoint, document)
        validate_ns = time.monotonic_ns() - started
        return CompletionRequest(
            endpoint=endpoint,
            body_bytes=len(body),
            parse_ns=parse_ns,
            validate_ns=validate_ns,
            # named here, untimed: the engine's prefix cache finds the prompt by them (bounded, lab.prefixcache)
            prefix_blocks=prompt_blocks(document),
            **fields,
        )

    # -- validation (one pass over the fields the API defines) -----------------------------------------------------
    def _validate(self, endpoint: Endpoint, document: Any) -> dict[str, Any]:
        if not isinstance(document, dict):
            raise _invalid_type("the request body", "an object", document, with_param=False)
        if endpoint is not Endpoint.CHAT and endpoint is not Endpoint.COMPLETIONS:
            return self._validate_api(endpoint, document)
        model = _required(document, "model", str, "a string", "You must provide a model parameter.")
        if model != self.model:
            raise model_not_found(model)

        images: list[tuple[int, int]] = []  # (bytes, decode ns) of each image part
        if endpoint is Endpoint.CHAT:
            prompt_tokens = self._chat_prompt_tokens(document)
            images = _chat_images(document["messages"])
            prompt_tokens += IMAGE_TOKENS * len(images)
            default_max = DEFAULT_MAX_TOKENS_CHAT
        else:
            prompt_tokens = self._completion_prompt_tokens(document)
            default_max = DEFAULT_MAX_TOKENS_COMPLETIONS
        max_tokens = _max_tokens(document, default_max)
        if prompt_tokens + max_tokens > self.max_context_tokens:
            raise invalid_request(
                f"This model's maximum context length is {self.max_context_tokens} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} for the "
                "completion). Please reduce the prompt or the completion length.",
                param="messages" if endpoint is Endpoint.CHAT else "prompt",
                code="context_length_exceeded",
            )

        stream = _optional(document, "stream", bool, "a boolean", False)
        include_usage = False
        options = document.get("stream_options")
        if options is not None:
            if not isinstance(options, dict):
                raise _invalid_type("stream_options", "an object", options)
            include_usage = _optional(options, "include_usage", bool, "a boolean", False, prefix="stream_options.")
        seed = _optional_int(document, "seed")
        n = _optional_int(document, "n")
        if n is not None and n != 1:
            raise invalid_request(
                f"Invalid 'n': the lab generates one choice per request, got {n}.", param="n", code="invalid_value"
            )
        for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "top_k"):
            value = document.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise _invalid_type(name, "a number", value)
        logprobs = document.get("logprobs")
        if logprobs is not None and not isinstance(logprobs, bool | int):
            raise _invalid_type("logprobs", "a boolean", logprobs)
        user = document.get("user")
        if user is not None and not isinstance(user, str):
            raise _invalid_type("user", "a string", user)  # accepted at any length; never tokenised
        tool = _forced_function(document) if endpoint is Endpoint.CHAT else None
        return {
            "model": model,
            "prompt_tokens": prompt_tokens,
            "max_tokens": max_tokens,
            "stream": stream,
            "include_usage": include_usage,
            "seed": seed,
            "sampled": sampling_paths(document),
            "tool": tool,
            "images": len(images),
            "image_bytes": sum(n for n, _ in images),
            "image_decode_ns": sum(ns for _, ns in images),
        }

    def _validate_api(self, endpoint: Endpoint, document: Mapping[str, Any]) -> dict[str, Any]:
        """The accepted fields of a request of another API than OpenAI chat / completions (one engine for all)."""
        fields = _read_api(endpoint, document)
        if fields.model is not None and fields.model != self.model:
            raise model_not_found(fields.model)
        if fields.prompt_tokens + fields.max_tokens > self.max_context_tokens:
            raise invalid_request(
                f"This model's maximum context length is {self.max_context_tokens} tokens. However, you requested "
                f"{fields.prompt_tokens + fields.max_tokens} tokens ({fields.prompt_tokens} in the prompt, "
                f"{fields.max_tokens} for the completion). Please reduce the prompt or the completion length.",
                param=fields.param,
                code="context_length_exceeded",
            )
        nested = document.get("parameters") or document.get("options")  # TGI's and Ollama's sampling settings
        settings = {**document, **nested} if isinstance(nested, dict) else document
        return {
            "model": fields.model or self.model,
            "prompt_tokens": fields.prompt_tokens,
            "max_tokens": fields.max_tokens,
            "stream": fields.stream,
            "include_usage": True,  # every one of these APIs reports usage at the end of a stream
            "seed": fields.seed,
            "sampled": sampling_paths(settings),
            "tool": fields.tool,
            "thinking_tokens": fields.thinking_tokens,
        }

    @staticmethod
    def _chat_prompt_tokens(document: Mapping[str, Any]) -> int:
        messages = _required(document, "messages", list, "an array", "Missing required parameter: 'messages'.")
        if not messages:
            raise invalid_request(
                "Invalid 'messages': empty array. Expected an array with minimum length 1.",
                param="messages",
                code="empty_array",
            )
        for index, message in enumerate(messages):
            where = f"messages[{index}]"
            if not isinstance(message, dict):
                raise _invalid_type(where, "an object", message)
            role = message.get("role")
            if role is None:
                raise invalid_request(
                    f"Missing required parameter: '{where}.role'.",
                    param=f"{where}.role",
                    code="missing_required_parameter",
                )
            if role not in CHAT_ROLES:
                raise invalid_request(
                    f"Invalid value: {_short(role)}. Supported values are: "
                    + ", ".join(f"'{r}'" for r in CHAT_ROLES)
                    + ".",
                    param=f"{where}.role",
                    code="invalid_value",
                )
            content = message.get("content")
            if content is None:
                if role != "assistant":  # an assistant turn may carry only tool calls
                    raise invalid_request(
                        f"Missing required parameter: '{where}.content'.",
                        param=f"{where}.content",
                        code="missing_required_parameter",
                    )
            elif isinstance(content, list):
                for part_index, part in enumerate(content):
                    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                        raise _invalid_type(f"{where}.content[{part_index}]", "an object with a 'type'", part)
            elif not isinstance(content, str):
                raise _invalid_type(f"{where}.content", "a string or an array of content parts", content)
            name = message.get("name")
            if name is not None and not isinstance(name, str):
                raise _invalid_type(f"{where}.name", "a string", name)
        return tokenizer.count_message_tokens(messages)

    @staticmethod
    def _completion_prompt_tokens(document: Mapping[str, Any]) -> int:
        prompt = document.get("prompt")
        if prompt is None:
            raise invalid_request(
                "Missing required parameter: 'prompt'.", param="prompt", code="missing_required_parameter"
            )
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            tokens = tokenizer.count_tokens(prompt)
        elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            tokens = len(prompt)  # already token ids
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
            raise invalid_request(
                "The lab serves one prompt per request; send the prompts separately.",
                param="prompt",
                code="invalid_value",
            )
        else:
            raise _invalid_type("prompt", "a string, an array of token ids, or an array of one of these", prompt)
        # A model always sees at least its begin-of-sequence token, so even an empty prompt is one token of prefill.
        return max(1, tokens)


def _chat_images(messages: list[Any]) -> list[tuple[int, int]]:
    """Decode every ``image_url`` part of validated chat ``messages``: ``(bytes, decode ns)`` of each; raises a 400
    :class:`ErrorResponse` naming the part that is not an image the lab accepts."""
    images: list[tuple[int, int]] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part_index, part in enumerate(content):
            if part.get("type") != "image_url":
                continue
            where = f"messages[{index}].content[{part_index}].image_url"
            image_url = part.get("image_url")
            url = image_url.get("url") if isinstance(image_url, dict) else image_url
            if not isinstance(url, str):
                raise _invalid_type(f"{where}.url", "a string", url)
            try:
                image = decode_image(url)
            except ImageError as exc:
                message = f"Invalid image in '{where}.url': {exc}."
                raise invalid_request(message, param=f"{where}.url", code="invalid_image") from None
            images.append((image.nbytes, image.decode_ns))
    return images


def _forced_function(document: Mapping[str, Any]) -> str | None:
    """The function an OpenAI chat request forces (``tool_choice`` ``{"type": "function", "function": {"name"}}``,
    or ``required``: the first tool), else None: with ``auto`` the lab answers with text."""
    tools = document.get("tools")
    choice = document.get("tool_choice")
    if not tools or choice in (None, "auto", "none"):
        return None
    if not isinstance(tools, list):
        raise _invalid_type("tools", "an array", tools)
    names = [tool.get("function", {}).get("name") if isinstance(tool, dict) else None for tool in tools]
    if not all(isinstance(name, str) and name for name in names):
        raise invalid_request("Missing required parameter: 'tools[].function.name'.", param="tools")
    if choice == "required":
        return str(names[0])
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if name not in names:
        raise invalid_request(f"Invalid 'tool_choice': no function named {name!r} in tools.", param="tool_choice")
    return str(name)


def _max_tokens(document: Mapping[str, Any], default: int) -> int:
    value = document.get("max_completion_tokens")
    name = "max_completion_tokens"
    if value is None:
        value = document.get("max_tokens")
        name = "max_tokens"
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid_type(name, "an integer", value)
    if value < 1:
        raise invalid_request(
            f"Invalid '{name}': integer below minimum value. Expected a value >= 1, but got {value} instead.",
            param=name,
            code="integer_below_min_value",
        )
    return value


def _required(document: Mapping[str, Any], name: str, kind: type, what: str, missing: str) -> Any:
    """The value of the required field ``name``: 400 ``missing`` when absent, 400 when not a ``kind``."""
    value = document.get(name)
    if value is None:
        raise invalid_request(missing, param=name, code="missing_required_parameter")
    if not isinstance(value, kind):
        raise _invalid_type(name, what, value)
    return value


def _optional(
    document: Mapping[str, Any], name: str, kind: type, kind_name: str, default: Any, *, prefix: str = ""
) -> Any:
    value = document.get(name)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise _invalid_type(prefix + name, kind_name, value)
    return value


def _optional_int(document: Mapping[str, Any], name: str) -> int | None:
    value = document.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid_type(name, "an integer", value)
    if not INT64_MIN <= value <= INT64_MAX:
        # orjson turns such numbers into floats (rejected above); stdlib json keeps them as ints: same answer for both.
        raise invalid_request(f"Invalid '{name}': {name} must be a 64-bit integer.", param=name, code="invalid_value")
    return value


def _invalid_type(where: str, expected: str, got: Any, *, with_param: bool = True) -> ErrorResponse:
    """400 ``invalid_type``, worded like OpenAI's ("expected an array, but got a string instead")."""
    return invalid_request(
        f"Invalid type for '{where}': expected {expected}, but got {_json_type(got)} instead.",
        param=where if with_param else None,
        code="invalid_type",
    )


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
