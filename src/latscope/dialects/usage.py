"""Token counts as the APIs report them, read into :class:`~latscope.timeline.model.Usage`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from latscope.timeline.model import Usage


def int_or_none(value: object) -> int | None:
    """``value`` when it is an integer (not a bool: an int subclass, excluded on purpose), else None."""
    return value if value.__class__ is int else None


def summed_usage(prompt: int | None, completion: int | None, cached: int | None = None) -> Usage:
    """A Usage of these token counts, ``total_tokens`` their sum when both are known."""
    total = prompt + completion if prompt is not None and completion is not None else None
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total, cached_tokens=cached)


def token_usage(usage: Mapping[str, Any], inputs: str, outputs: str) -> Usage:
    """A Usage from an OpenAI-style ``usage`` object whose counts are ``<inputs>_tokens`` and ``<outputs>_tokens``
    (``prompt`` / ``completion`` in chat completions, ``input`` / ``output`` in Responses), cached and reasoning
    tokens from their ``_tokens_details``; fields that are not integers are left None."""
    input_details = usage.get(f"{inputs}_tokens_details")
    output_details = usage.get(f"{outputs}_tokens_details")
    return Usage(
        prompt_tokens=int_or_none(usage.get(f"{inputs}_tokens")),
        completion_tokens=int_or_none(usage.get(f"{outputs}_tokens")),
        total_tokens=int_or_none(usage.get("total_tokens")),
        cached_tokens=int_or_none(input_details.get("cached_tokens")) if isinstance(input_details, dict) else None,
        reasoning_tokens=(
            int_or_none(output_details.get("reasoning_tokens")) if isinstance(output_details, dict) else None
        ),
    )
