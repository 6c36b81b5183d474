"""Token-length distributions for synthetic prompts and outputs.

A :class:`LengthDist` draws integer token counts (≥ 1) from one of four shapes. The text form, used on the command
line and stored in ``run.json``, is the same one :func:`parse_length` reads back:

==========================  =======================================================================================
``128`` / ``fixed(128)``    always 128 tokens
``uniform(64,512)``         uniform integers in [64, 512], both ends included
``normal(256,64)``          normal with mean 256 and standard deviation 64, rounded, clipped to [1, ∞)
``lognormal(256,0.6)``      log-normal with *mean* 256 and log-space sigma 0.6 (a long right tail, like real chat
                            traffic), rounded, clipped to [1, ∞)
==========================  =======================================================================================

Any shape takes an optional ``max=N`` clip as a last argument (``lognormal(256,0.6,max=4096)``), so a heavy tail
cannot ask a server for more context than it has.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt


class LengthKind(StrEnum):
    """The shape of a token-length distribution."""

    FIXED = "fixed"
    UNIFORM = "uniform"
    NORMAL = "normal"
    LOGNORMAL = "lognormal"


class LengthSpecError(ValueError):
    """A length specification could not be parsed; the message quotes it and shows the accepted forms."""


_FORMS = "N, fixed(N), uniform(LOW,HIGH), normal(MEAN,STDDEV), lognormal(MEAN,SIGMA), each with optional ,max=N"


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A distribution of token counts.

    ``a`` and ``b`` mean, by ``kind``: fixed → (count, unused); uniform → (low, high); normal → (mean, stddev);
    lognormal → (mean, sigma of the underlying normal). ``max_tokens`` clips every sample (None: no upper clip).
    Samples are always integers ≥ 1.
    """

    kind: LengthKind
    a: float
    b: float = 0.0
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.a <= 0 and self.kind is not LengthKind.UNIFORM:
            raise LengthSpecError(f"{self.kind}: the first parameter must be > 0, got {self.a:g}")
        if self.kind is LengthKind.UNIFORM and not 1 <= self.a <= self.b:
            raise LengthSpecError(f"uniform: need 1 <= low <= high, got ({self.a:g}, {self.b:g})")
        if self.kind in (LengthKind.NORMAL, LengthKind.LOGNORMAL) and self.b < 0:
            raise LengthSpecError(f"{self.kind}: the spread must be >= 0, got {self.b:g}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise LengthSpecError(f"max must be >= 1, got {self.max_tokens}")

    @classmethod
    def fixed(cls, tokens: int) -> LengthDist:
        """Always ``tokens`` tokens."""
        return cls(LengthKind.FIXED, float(tokens))

    @property
    def mean(self) -> float:
        """The distribution's mean before clipping, in tokens (what a user asked for)."""
        if self.kind is LengthKind.UNIFORM:
            return (self.a + self.b) / 2
        return self.a

    def sample(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
        """``n`` token counts drawn with ``rng`` (integers ≥ 1, ≤ ``max_tokens`` when set)."""
        values: npt.NDArray[np.float64]
        if self.kind is LengthKind.FIXED:
            values = np.full(n, self.a)
        elif self.kind is LengthKind.UNIFORM:
            values = rng.integers(int(self.a), int(self.b), size=n, endpoint=True).astype(np.float64)
        elif self.kind is LengthKind.NORMAL:
            values = rng.normal(self.a, self.b, size=n)
        else:
            # Parameterised by the mean the user sees, not by mu: E[X] = exp(mu + sigma²/2).
            mu = math.log(self.a) - self.b * self.b / 2
            values = rng.lognormal(mu, self.b, size=n)
        out = np.maximum(np.rint(values), 1).astype(np.int64)
        if self.max_tokens is not None:
            np.minimum(out, self.max_tokens, out=out)
        return out

    def __str__(self) -> str:
        args = [f"{self.a:g}"] if self.kind is LengthKind.FIXED else [f"{self.a:g}", f"{self.b:g}"]
        if self.max_tokens is not None:
            args.append(f"max={self.max_tokens}")
        return f"{self.kind}({','.join(args)})"


_CALL = re.compile(r"^\s*([a-z]+)\s*\((.*)\)\s*$")


def parse_length(text: str) -> LengthDist:
    """Parse ``128``, ``fixed(128)``, ``uniform(64,512)``, ``normal(256,64)``, ``lognormal(256,0.6,max=4096)``."""
    stripped = text.strip()
    if re.fullmatch(r"\d+", stripped):
        return LengthDist.fixed(int(stripped))
    match = _CALL.match(stripped.lower())
    if match is None:
        raise LengthSpecError(f"cannot read token length {text!r}; use {_FORMS}")
    name, body = match.groups()
    try:
        kind = LengthKind(name)
    except ValueError:
        raise LengthSpecError(f"unknown length shape {name!r} in {text!r}; use {_FORMS}") from None
    numbers: list[float] = []
    max_tokens: int | None = None
    try:
        for part in (p.strip() for p in body.split(",") if p.strip()):
            if part.startswith("max="):
                max_tokens = int(part[4:])
            else:
                numbers.append(float(part))
    except ValueError:
        raise LengthSpecError(f"non-numeric parameter in {text!r}; use {_FORMS}") from None
    wanted = 1 if kind is LengthKind.FIXED else 2
    if len(numbers) != wanted:
        raise LengthSpecError(f"{kind} takes {wanted} number(s), got {len(numbers)} in {text!r}; use {_FORMS}")
    if kind is LengthKind.FIXED:
        return LengthDist(kind, numbers[0], max_tokens=max_tokens)
    return LengthDist(kind, numbers[0], numbers[1], max_tokens=max_tokens)
