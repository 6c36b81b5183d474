"""Model lists: which model ids a server serves, from its ``/models`` (OpenAI, Anthropic), ``/api/tags`` (Ollama) or
``/info`` (TGI) answer."""

from __future__ import annotations

import orjson

from latscope.dialects.base import StreamDecodeError, excerpt

#: Where each list shape keeps its entries, and the fields of an entry that name a model, in order of preference.
_LIST_SHAPES = (("data", ("id",)), ("models", ("model", "name")))


def parse_models(body: bytes) -> list[str]:
    """The model ids in a model-list response, in order, without duplicates.

    Reads OpenAI's (and Anthropic's) ``{"data": [{"id": ...}]}``, Ollama's ``{"models": [{"model"/"name": ...}]}``
    (which llama-server sends next to OpenAI's) and TGI's ``/info`` (``{"model_id": ...}``: the one model it
    serves). Raises :class:`StreamDecodeError` when the body is not JSON.
    """
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise StreamDecodeError(f"the model list is not JSON ({exc}): {excerpt(body)}") from None
    ids: list[str] = []
    if isinstance(obj, dict) and isinstance(obj.get("model_id"), str) and obj["model_id"]:
        ids.append(obj["model_id"])
    if isinstance(obj, dict):
        for key, fields in _LIST_SHAPES:
            entries = obj.get(key)
            if not isinstance(entries, list):
                continue
            for entry in entries:
                if not isinstance(entry, dict):
                    continue
                for name in fields:
                    value = entry.get(name)
                    if isinstance(value, str) and value:
                        if value not in ids:
                            ids.append(value)
                        break
    return ids
