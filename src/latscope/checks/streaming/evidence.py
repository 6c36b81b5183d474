"""The streaming experiment's evidence: the same request under several ACK conditions (durations in ms)."""

from __future__ import annotations

from dataclasses import dataclass

from latscope.checks.samples import RequestSample


@dataclass(frozen=True, slots=True)
class StreamEvidence:
    """The streaming experiment: the same request (``max_tokens`` tokens) under several ACK conditions, and the
    same prompt with ``max_tokens`` 1 for the buffering comparison.

    Conditions (each a tuple of samples; empty when not run):
        fresh: new connections, the kernel's default ACK behaviour.
        reused: one client pool after a warm-up request (reused connections when the server keeps them alive).
        delayed_ack: new connections put into delayed-ACK mode (TCP_QUICKACK 0) before the request, the ACK state
            every reused keep-alive connection is in; available on Linux only (``delayed_ack_supported``).
        quickack: the client ACKs every read at once (TCP_QUICKACK 1 before each read), one pool after a warm-up:
            the control, with Nagle's wait for an ACK removed.
        quickack_short: quickack, ``max_tokens`` 1: TTFT when there is nothing to hold back.
        quickack_fresh: quickack on new connections, sent alternately with ``delayed_ack``: its control. A
            connection's first request pays for things its later ones do not (the server's first read of the
            connection, an HTTP/2 preface and settings, TLS session tickets), several ms on a busy host.
        quickack_http11 / quickack_short_http11: the same two on a client that offers only HTTP/1.1, when the
            target negotiated HTTP/2 (a proxy may buffer one protocol and not the other); empty otherwise.
    """

    max_tokens: int
    fresh: tuple[RequestSample, ...] = ()
    reused: tuple[RequestSample, ...] = ()
    delayed_ack: tuple[RequestSample, ...] = ()
    quickack: tuple[RequestSample, ...] = ()
    quickack_short: tuple[RequestSample, ...] = ()
    quickack_fresh: tuple[RequestSample, ...] = ()
    quickack_http11: tuple[RequestSample, ...] = ()
    quickack_short_http11: tuple[RequestSample, ...] = ()
    delayed_ack_supported: bool = True
    quickack_supported: bool = True


def all_samples(ev: StreamEvidence) -> tuple[RequestSample, ...]:
    """Every stream of every condition."""
    return (
        *ev.fresh,
        *ev.reused,
        *ev.delayed_ack,
        *ev.quickack,
        *ev.quickack_short,
        *ev.quickack_fresh,
        *ev.quickack_http11,
        *ev.quickack_short_http11,
    )
