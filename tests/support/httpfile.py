"""Read the byte-for-byte HTTP captures in tests/fixtures/real/ and tests/fixtures/lab/ (``curl -i --raw`` output)
with h11."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import h11

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"
LAB = REAL.parent / "lab"


@dataclass(frozen=True)
class Capture:
    """One captured response: status, headers (lower-case names, in order), the body with framing removed, and the
    body as the separate HTTP chunks (``Data`` events) the server framed it in."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    chunks: list[bytes]

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name.lower():
                return value
        return None


def load_capture(name: str, directory: Path = REAL) -> Capture:
    """Parse ``<directory>/<name>`` (default tests/fixtures/real/) as an HTTP/1.1 response (status line, headers,
    chunked/length body)."""
    raw = (directory / name).read_bytes()
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "fixture")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(raw)
    conn.receive_data(b"")
    status = 0
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Response):
            status = event.status_code
            headers = [(k.decode().lower(), v.decode("latin-1")) for k, v in event.headers]
        elif isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)) or event is h11.NEED_DATA:
            break
    return Capture(status=status, headers=headers, body=b"".join(chunks), chunks=chunks)


def capture_names() -> list[str]:
    """All capture file names."""
    return sorted(p.name for p in REAL.glob("*.http"))
