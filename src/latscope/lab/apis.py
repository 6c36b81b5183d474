"""The APIs the lab speaks besides OpenAI chat and completions: where each one's request fields are, and how each one
shapes its errors. One engine serves them all (same scheduler, same faults); only the bytes differ.

==============================  ======  ================================================================
``/v1/responses``               POST    OpenAI Responses: ``input``, ``max_output_tokens``, ``stream``
``/v1/messages``                POST    Anthropic Messages: ``messages``, ``system``, ``max_tokens`` (required)
``/generate_stream``            POST    TGI native, streamed: ``inputs``, ``parameters.max_new_tokens``
``/generate``                   POST    TGI native, one JSON answer
``/api/chat``, ``/api/generate``  POST  Ollama native: ``messages`` / ``prompt``, ``options.num_predict``, ``stream``
                                        (default true), NDJSON
==============================  ======  ================================================================

Errors, each in its API's shape (:func:`error_body`): OpenAI ``{"error": {"message", "type", "param", "code"}}``;
Anthropic ``{"type": "error", "error": {"type", "message"}}`` with its error types; TGI ``{"error", "error_type"}``
(validation errors are 422, as TGI sends them); Ollama ``{"error": "..."}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from latscope.lab import tokenizer
from latscope.lab.errors import ErrorResponse, invalid_request

#: Anthropic's error ``type`` for each status the lab answers with (Anthropic API documentation, "Errors").
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}

#: TGI's ``error_type`` for each status (its router: 422 validation, 424 generation, 429 overloaded).
TGI_ERROR_TYPES = {400: "validation", 422: "validation", 424: "generation", 429: "overloaded", 503: "overloaded"}

#: ``max_new_tokens`` when a TGI request names none (TGI's default).
TGI_DEFAULT_MAX_NEW_TOKENS = 100
#: ``num_predict`` when an Ollama request names none: Ollama generates until the model stops; the lab, whose model
#: never stops by itself, stops here so an omitted limit cannot tie the engine up for minutes.
OLLAMA_DEFAULT_NUM_PREDICT = 256
#: ``max_output_tokens`` when a Responses request names none (same reason as the chat default).
RESPONSES_DEFAULT_MAX_TOKENS = 256


class ErrorStyle(StrEnum):
    """The shape an API gives its error bodies."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    TGI = "tgi"
    OLLAMA = "ollama"


def error_status(error: ErrorResponse, style: ErrorStyle) -> int:
    """The status an API answers ``error`` with: TGI answers validation errors with 422, not 400."""
    return 422 if style is ErrorStyle.TGI and error.status == 400 else error.status


def error_body(error: ErrorResponse, style: ErrorStyle) -> bytes:
    """``error`` as the body its API sends (UTF-8 JSON)."""
    if style is ErrorStyle.ANTHROPIC:
        kind = ANTHROPIC_ERROR_TYPES.get(error.status, "api_error" if error.status >= 500 else "invalid_request_error")
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": error.message}})
    if style is ErrorStyle.TGI:
        status = error_status(error, style)
        return orjson.dumps({"error": error.message, "error_type": TGI_ERROR_TYPES.get(status, "generation")})
    if style is ErrorStyle.OLLAMA:
        return orjson.dumps({"error": error.message})
    return error.body()


def stream_error_event(message: str, style: ErrorStyle) -> bytes:
    """An error inside an already started stream, framed as its API frames one."""
    if style is ErrorStyle.ANTHROPIC:
        body = orjson.dumps({"type": "error", "error": {"type": "api_error", "message": message}})
        return b"event: error\ndata: " + body + b"\n\n"
    if style is ErrorStyle.TGI:
        return b"data:" + orjson.dumps({"error": message, "error_type": "generation"}) + b"\n\n"
    if style is ErrorStyle.OLLAMA:
        return orjson.dumps({"error": message}) + b"\n"
    error = {"message": message, "type": "server_error", "param": None, "code": None}
    return b"data: " + orjson.dumps({"error": error}) + b"\n\n"


@dataclass(frozen=True, slots=True)
class ApiFields:
    """What the gateway needs from a request of any API."""

    model: str | None  #: the model named (None: the API names none, as TGI's native one)
    prompt_tokens: int
    max_tokens: int
    stream: bool
    seed: int | None
    param: str  #: the field that holds the prompt, for a context-length error
    tool: str | None = None  #: the tool the request makes the answer call (Anthropic ``tool_choice``), else None
    thinking_tokens: int = 0  #: how many of the tokens are thinking (Anthropic extended thinking), before the text


def _field(document: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str, where: str = "") -> Any:
    value = document.get(name)
    if value is not None and ((isinstance(value, bool) and kind is not bool) or not isinstance(value, kind)):
        raise invalid_request(f"Invalid type for '{where}{name}': expected {what}.", param=where + name)
    return value


def _limit(document: Mapping[str, Any], name: str, default: int | None, where: str = "") -> int:
    value = _field(document, name, int, "an integer", where)
    if value is None:
        if default is None:
            raise invalid_request(f"{where}{name}: Field required", param=where + name)
        return default
    if value < 1:
        raise invalid_request(f"Invalid '{where}{name}': expected a value >= 1, got {value}.", param=where + name)
    return int(value)


def _model(document: Mapping[str, Any]) -> str:
    model = document.get("model")
    if not isinstance(model, str) or not model:
        raise invalid_request("model: Field required", param="model")
    return model


def _messages(document: Mapping[str, Any], name: str = "messages") -> list[Mapping[str, Any]]:
    messages = document.get(name)
    if not isinstance(messages, list) or not messages:
        raise invalid_request(f"{name}: Field required (a non-empty array of messages)", param=name)
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise invalid_request(f"{name}.{index}: expected a message object with a role", param=f"{name}.{index}")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise invalid_request(f"{name}.{index}.content: expected a string or an array", param=f"{name}.{index}")
    return messages


def _seed(document: Mapping[str, Any], where: str = "") -> int | None:
    value = _field(document, "seed", int, "an integer", where)
    return None if value is None else int(value)


def read_responses(document: Mapping[str, Any]) -> ApiFields:
    """An OpenAI Responses request (``input`` text or items)."""
    model = _model(document)
    value = document.get("input")
    if isinstance(value, str):
        prompt = max(1, tokenizer.count_tokens(value))
    elif isinstance(value, list) and value:
        prompt = tokenizer.count_message_tokens(_messages(document, "input"))
    else:
        raise invalid_request("Missing required parameter: 'input'.", param="input")
    _field(document, "instructions", str, "a string")
    return ApiFields(
        model=model,
        prompt_tokens=prompt,
        max_tokens=_limit(document, "max_output_tokens", RESPONSES_DEFAULT_MAX_TOKENS),
        stream=bool(_field(document, "stream", bool, "a boolean")),
        seed=None,
        param="input",
        tool=_forced_function(document),
    )


def _forced_function(document: Mapping[str, Any]) -> str | None:
    """The function a Responses request forces (``tool_choice`` ``{"type": "function", "name"}``, or ``required``:
    the first function tool), else None: with ``auto`` the lab answers with text."""
    tools = _field(document, "tools", list, "an array of tools")
    choice = document.get("tool_choice")
    if not tools or choice in (None, "auto", "none"):
        return None
    names = [tool.get("name") for tool in tools if isinstance(tool, dict) and tool.get("type") == "function"]
    if not names or not all(isinstance(name, str) and name for name in names):
        raise invalid_request("tools: every function tool needs a name", param="tools")
    if choice == "required":
        return str(names[0])
    name = choice.get("name") if isinstance(choice, dict) else None
    if name not in names:
        raise invalid_request(f"tool_choice: no function named {name!r} in tools", param="tool_choice")
    return str(name)


def read_messages(document: Mapping[str, Any]) -> ApiFields:
    """An Anthropic Messages request (``max_tokens`` is required, as in the API)."""
    model = _model(document)
    messages = _messages(document)
    max_tokens = _limit(document, "max_tokens", None)
    system = _field(document, "system", (str, list), "a string or an array of text blocks")
    prompt = tokenizer.count_message_tokens(messages)
    if system:
        prompt += tokenizer.count_message_tokens([{"role": "system", "content": system}]) - 1
    _field(document, "temperature", (int, float), "a number")
    return ApiFields(
        model=model,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        stream=bool(_field(document, "stream", bool, "a boolean")),
        seed=None,
        param="messages",
        tool=_forced_tool(document),
        thinking_tokens=_thinking_tokens(document, max_tokens),
    )


def _thinking_tokens(document: Mapping[str, Any], max_tokens: int) -> int:
    """How many tokens an Anthropic request with ``thinking: {"type": "enabled", "budget_tokens": N}`` spends
    thinking: ``N``, leaving at least one token of text (the lab's model thinks as long as it may)."""
    thinking = _field(document, "thinking", dict, "an object")
    if not thinking or thinking.get("type") != "enabled":
        return 0
    budget = _limit(thinking, "budget_tokens", None, "thinking.")
    return min(budget, max_tokens - 1)


def _forced_tool(document: Mapping[str, Any]) -> str | None:
    """The tool an Anthropic request forces (``tool_choice`` ``{"type": "tool", "name"}``, or ``any``: the first
    tool), else None: with ``auto`` the lab answers with text, as a model that chose not to call a tool."""
    tools = _field(document, "tools", list, "an array of tools")
    choice = _field(document, "tool_choice", dict, "an object")
    if not tools or not choice:
        return None
    names = [tool.get("name") for tool in tools if isinstance(tool, dict)]
    if not all(isinstance(name, str) and name for name in names):
        raise invalid_request("tools: every tool needs a name", param="tools")
    if choice.get("type") == "any":
        return str(names[0])
    if choice.get("type") == "tool":
        name = choice.get("name")
        if name not in names:
            raise invalid_request(f"tool_choice: no tool named {name!r} in tools", param="tool_choice")
        return str(name)
    return None


def read_tgi(document: Mapping[str, Any], *, stream: bool) -> ApiFields:
    """A TGI native request (``inputs`` text; ``parameters`` object). The route decides streaming."""
    inputs = document.get("inputs")
    if not isinstance(inputs, str):
        raise invalid_request("Input validation error: `inputs` must be a string", param="inputs")
    parameters = document.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise invalid_request("Input validation error: `parameters` must be an object", param="parameters")
    return ApiFields(
        model=None,
        prompt_tokens=max(1, tokenizer.count_tokens(inputs)),
        max_tokens=_limit(parameters, "max_new_tokens", TGI_DEFAULT_MAX_NEW_TOKENS, "parameters."),
        stream=stream,
        seed=_seed(parameters, "parameters."),
        param="inputs",
    )


def read_ollama(document: Mapping[str, Any], *, chat: bool) -> ApiFields:
    """An Ollama ``/api/chat`` (``messages``) or ``/api/generate`` (``prompt``) request; ``stream`` defaults to
    true, as in Ollama."""
    model = _model(document)
    if chat:
        prompt = tokenizer.count_message_tokens(_messages(document))
    else:
        text = _field(document, "prompt", str, "a string")
        prompt = max(1, tokenizer.count_tokens(text or ""))
    options = document.get("options") or {}
    if not isinstance(options, dict):
        raise invalid_request("options: expected an object", param="options")
    stream = _field(document, "stream", bool, "a boolean")
    return ApiFields(
        model=model,
        prompt_tokens=prompt,
        max_tokens=_limit(options, "num_predict", OLLAMA_DEFAULT_NUM_PREDICT, "options."),
        stream=True if stream is None else bool(stream),
        seed=_seed(options, "options."),
        param="messages" if chat else "prompt",
    )
