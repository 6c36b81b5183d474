"""A deliberately plain implementation of WHATWG HTML §9.2.6 "Interpreting an event stream", used as an oracle.

It decodes the whole stream first (UTF-8 with replacement, one leading BOM stripped, as the spec says), then walks the
lines one at a time exactly as the spec's steps read. No incremental feeding, no fast paths.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_LINE = re.compile(r"([^\r\n]*)(\r\n|\r|\n)")


class RefEvent(NamedTuple):
    event: str
    data: str
    id: str | None
    retry: int | None


class RefResult(NamedTuple):
    events: list[RefEvent]
    last_event_id: str | None
    retry_ms: int | None


def reference_parse(stream: bytes) -> RefResult:
    text = stream.decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    events: list[RefEvent] = []
    data = ""
    event_type = ""
    last_id: str | None = None
    retry: int | None = None
    # Only terminated lines are lines; whatever follows the last line ending is an incomplete line and is dropped.
    for match in _LINE.finditer(text):
        line = match.group(1)
        if line == "":
            if data == "":
                event_type = ""
                continue
            if data.endswith("\n"):
                data = data[:-1]
            events.append(RefEvent(event_type or "message", data, last_id, retry))
            data = ""
            event_type = ""
        elif line.startswith(":"):
            continue
        else:
            if ":" in line:
                name, value = line.split(":", 1)
                if value.startswith(" "):
                    value = value[1:]
            else:
                name, value = line, ""
            if name == "data":
                data += value + "\n"
            elif name == "event":
                event_type = value
            elif name == "id":
                if "\x00" not in value:
                    last_id = value
            elif name == "retry" and value and all("0" <= ch <= "9" for ch in value):
                retry = int(value)
    return RefResult(events, last_id, retry)
