"""The data model every other part of latscope speaks: one :class:`Timeline` per request attempt."""

from latscope.timeline import metrics
from latscope.timeline.model import (
    TOKEN_KINDS,
    Attempt,
    ConnectionInfo,
    EventKind,
    Phase,
    Read,
    RequestError,
    ServerMeasure,
    StampSource,
    StreamEvent,
    TcpInfo,
    Timeline,
    Usage,
)
from latscope.timeline.serialize import SCHEMA, TimelineFormatError, dumps, loads, timeline_from_dict, timeline_to_dict

__all__ = [
    "SCHEMA",
    "TOKEN_KINDS",
    "Attempt",
    "ConnectionInfo",
    "EventKind",
    "Phase",
    "Read",
    "RequestError",
    "ServerMeasure",
    "StampSource",
    "StreamEvent",
    "TcpInfo",
    "Timeline",
    "TimelineFormatError",
    "Usage",
    "dumps",
    "loads",
    "metrics",
    "timeline_from_dict",
    "timeline_to_dict",
]
