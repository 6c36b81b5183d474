"""What a benchmark sends: workload classes, their mix, prompt files, and the reproducible request plan.

A :class:`Workload` is one or more :class:`WorkloadClass` es mixed by weight ("80 % short chat, 20 % long context").
Each class draws its prompt length and output length (``max_tokens``) from :class:`~latscope.load.lengths.LengthDist`
s, or replays prompts from a JSONL file. :class:`Plan` turns a workload and a seed into the request at every global
index; the same seed gives the same requests in every run and in every worker process, which is what lets worker
``w`` of ``N`` take indices ``w, w+N, w+2N, …`` without talking to the others.

Class text form (``--class``), comma-separated, parentheses protect the commas of a length::

    short:weight=0.8,prompt=normal(200,50),output=128
    long:weight=0.2,prompt=lognormal(4000,0.3,max=8000),output=256,ignore_eos
    replay:weight=1,file=prompts.jsonl,output=256

Prompt file (JSONL, one request per line; blank lines ignored)::

    {"prompt": "Explain TCP slow start."}
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, "class": "greeting"}

``max_tokens`` on a line overrides the class's output length; ``class`` relabels that request's results.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import orjson

from latscope.load.lengths import LengthDist, LengthSpecError, parse_length

#: Requests planned per random block. Each block has its own RNG stream keyed by (seed, block), so a plan is cheap to
#: produce in any worker and never depends on how many requests an earlier run drew.
PLAN_BLOCK = 1024

#: Default lengths when the user names none: a short chat turn, as in common serving benchmarks.
DEFAULT_PROMPT_TOKENS = 256
DEFAULT_OUTPUT_TOKENS = 128

_RNG_STREAM_WORKLOAD = 1  # distinct from the arrival stream (latscope.load.arrivals) so they never correlate


class WorkloadSpecError(ValueError):
    """A workload class or prompt file could not be read; the message names the class, file line or field."""


class PromptRecord(NamedTuple):
    """One line of a prompt file: a plain prompt or a chat message list, with optional overrides."""

    prompt: str | None
    messages: list[dict[str, Any]] | None
    max_tokens: int | None
    label: str | None


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    """One kind of request in the mix.

    ``weight`` is relative (weights need not sum to 1). ``prompt_tokens`` is ignored when ``prompt_file`` is set.
    ``ignore_eos`` asks the server to generate exactly ``max_tokens`` (vLLM/SGLang/the lab honour it; others ignore it).
    """

    name: str
    weight: float = 1.0
    prompt_tokens: LengthDist = field(default_factory=lambda: LengthDist.fixed(DEFAULT_PROMPT_TOKENS))
    output_tokens: LengthDist = field(default_factory=lambda: LengthDist.fixed(DEFAULT_OUTPUT_TOKENS))
    ignore_eos: bool = False
    prompt_file: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise WorkloadSpecError("a workload class needs a name")
        if not self.weight > 0:
            raise WorkloadSpecError(f"class {self.name!r}: weight must be > 0, got {self.weight:g}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (lengths in their text form)."""
        return {
            "name": self.name,
            "weight": self.weight,
            "prompt_tokens": None if self.prompt_file else str(self.prompt_tokens),
            "output_tokens": str(self.output_tokens),
            "ignore_eos": self.ignore_eos,
            "prompt_file": self.prompt_file,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkloadClass:
        """Inverse of :meth:`to_dict`."""
        return cls(
            name=data["name"],
            weight=float(data.get("weight", 1.0)),
            prompt_tokens=parse_length(data.get("prompt_tokens") or str(DEFAULT_PROMPT_TOKENS)),
            output_tokens=parse_length(data.get("output_tokens") or str(DEFAULT_OUTPUT_TOKENS)),
            ignore_eos=bool(data.get("ignore_eos", False)),
            prompt_file=data.get("prompt_file"),
        )


@dataclass(frozen=True, slots=True)
class Workload:
    """The request mix and the seed that makes it reproducible."""

    classes: tuple[WorkloadClass, ...]
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.classes:
            raise WorkloadSpecError("a workload needs at least one class")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise WorkloadSpecError(f"class names must be unique, got {names}")

    @classmethod
    def single(
        cls,
        prompt_tokens: LengthDist | None = None,
        output_tokens: LengthDist | None = None,
        *,
        ignore_eos: bool = False,
        prompt_file: str | None = None,
        seed: int = 0,
        name: str = "default",
    ) -> Workload:
        """A one-class workload."""
        return cls(
            (
                WorkloadClass(
                    name=name,
                    prompt_tokens=prompt_tokens or LengthDist.fixed(DEFAULT_PROMPT_TOKENS),
                    output_tokens=output_tokens or LengthDist.fixed(DEFAULT_OUTPUT_TOKENS),
                    ignore_eos=ignore_eos,
                    prompt_file=prompt_file,
                ),
            ),
            seed=seed,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"seed": self.seed, "classes": [c.to_dict() for c in self.classes]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        """Inverse of :meth:`to_dict`."""
        return cls(tuple(WorkloadClass.from_dict(c) for c in data["classes"]), seed=int(data.get("seed", 0)))


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` on ``sep`` outside parentheses (``a=uniform(1,2),b`` → ``["a=uniform(1,2)", "b"]``)."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_class(text: str) -> WorkloadClass:
    """Parse ``NAME:key=value,...`` (keys: weight, prompt, output, file, ignore_eos); see the module docstring."""
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep or not name:
        raise WorkloadSpecError(f"cannot read class {text!r}; expected NAME:weight=W,prompt=LEN,output=LEN")
    kwargs: dict[str, Any] = {"name": name}
    try:
        for item in split_top_level(rest):
            key, eq, value = item.partition("=")
            key = key.strip().lower().replace("-", "_")
            if key == "ignore_eos" and not eq:
                kwargs["ignore_eos"] = True
            elif key == "ignore_eos":
                kwargs["ignore_eos"] = value.strip().lower() in ("1", "true", "yes", "on")
            elif key == "weight":
                kwargs["weight"] = float(value)
            elif key == "prompt":
                kwargs["prompt_tokens"] = parse_length(value)
            elif key == "output":
                kwargs["output_tokens"] = parse_length(value)
            elif key == "file":
                kwargs["prompt_file"] = value.strip()
            else:
                known = "weight, prompt, output, file, ignore_eos"
                raise WorkloadSpecError(f"class {name!r}: unknown key {key!r} ({known})")
    except (LengthSpecError, ValueError) as exc:
        if isinstance(exc, WorkloadSpecError):
            raise
        raise WorkloadSpecError(f"class {name!r}: {exc}") from None
    return WorkloadClass(**kwargs)


def load_prompt_file(path: str | Path) -> list[PromptRecord]:
    """Read a JSONL prompt file; raises :class:`WorkloadSpecError` naming the file and line of the first bad record."""
    records: list[PromptRecord] = []
    source = Path(path)
    try:
        lines = source.read_bytes().splitlines()
    except OSError as exc:
        raise WorkloadSpecError(f"cannot read prompt file {source}: {exc.strerror or exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise WorkloadSpecError(f"{where}: not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise WorkloadSpecError(f"{where}: expected an object with 'prompt' or 'messages'")
        prompt = data.get("prompt")
        messages = data.get("messages")
        if prompt is None and messages is None:
            raise WorkloadSpecError(f"{where}: needs 'prompt' (a string) or 'messages' (a list)")
        if prompt is not None and not isinstance(prompt, str):
            raise WorkloadSpecError(f"{where}: 'prompt' must be a string")
        if messages is not None and not isinstance(messages, list):
            raise WorkloadSpecError(f"{where}: 'messages' must be a list of {{role, content}} objects")
        max_tokens = data.get("max_tokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise WorkloadSpecError(f"{where}: 'max_tokens' must be a positive integer")
        label = data.get("class")
        records.append(PromptRecord(prompt, messages, max_tokens, None if label is None else str(label)))
    if not records:
        raise WorkloadSpecError(f"prompt file {source} has no prompts")
    return records


class PlannedRequest(NamedTuple):
    """One request of the plan, before it is built into bytes.

    ``prompt_tokens`` is the synthetic prompt length (None for a file prompt: only the server's usage knows it);
    ``prompt`` / ``messages`` are set for file prompts only (a synthetic prompt is generated when the request is built).
    """

    request_id: int  #: global index in the step (0-based), the same in every worker
    class_name: str
    prompt_tokens: int | None
    max_tokens: int
    ignore_eos: bool
    prompt: str | None
    messages: list[dict[str, Any]] | None


#: Synthetic prompts with seeds below this start with distinct words (latscope.dialects.prompts), so no two requests
#: of a run share a first token and a server's prefix cache cannot make later requests artificially cheap.
PROMPT_SEEDS = 128**4


def prompt_seed(seed: int, index: int) -> int:
    """The seed of request ``index``'s synthetic prompt: distinct for every index of a run (below
    :data:`PROMPT_SEEDS` requests), shifted by the run's seed, stable across runs with the same seed."""
    return (seed * 1_000_003 + index) % PROMPT_SEEDS


class Plan:
    """The request at every global index of a workload, produced block by block and reproducible from the seed."""

    def __init__(self, workload: Workload, files: dict[str, Sequence[PromptRecord]] | None = None) -> None:
        self.workload = workload
        self._weights = np.array([c.weight for c in workload.classes], dtype=np.float64)
        self._weights /= self._weights.sum()
        self._files: dict[str, Sequence[PromptRecord]] = dict(files or {})
        for cls in workload.classes:
            if cls.prompt_file and cls.name not in self._files:
                self._files[cls.name] = load_prompt_file(cls.prompt_file)

    def prompt_records(self, class_name: str) -> Sequence[PromptRecord]:
        """The prompt-file records of a class (empty for a synthetic class)."""
        return self._files.get(class_name, ())

    def _block(self, block: int) -> _Block:
        """The random draws of one block, as arrays (cheap: a few vectorised calls, no per-request objects)."""
        n = PLAN_BLOCK
        rng = np.random.default_rng([self.workload.seed, _RNG_STREAM_WORKLOAD, block])
        classes = self.workload.classes
        choice = rng.choice(len(classes), size=n, p=self._weights) if len(classes) > 1 else np.zeros(n, np.int64)
        prompt_len = [c.prompt_tokens.sample(rng, n).tolist() for c in classes]
        output_len = [c.output_tokens.sample(rng, n).tolist() for c in classes]
        return _Block(choice, choice.tolist(), prompt_len, output_len)

    def _item(self, index: int, b: _Block, j: int, file_cursor: list[int]) -> PlannedRequest:
        k = b.choice_list[j]
        cls = self.workload.classes[k]
        max_tokens = b.output_len[k][j]
        records = self._files.get(cls.name)
        if records is None:
            return PlannedRequest(index, cls.name, b.prompt_len[k][j], max_tokens, cls.ignore_eos, None, None)
        # File prompts replay in file order (cycled), so a replay is the same sequence every run.
        rec = records[file_cursor[k] % len(records)]
        file_cursor[k] += 1
        return PlannedRequest(
            index, rec.label or cls.name, None, rec.max_tokens or max_tokens, cls.ignore_eos, rec.prompt, rec.messages
        )

    def iterate(self, start: int = 0, stride: int = 1, stop: int | None = None) -> Iterator[PlannedRequest]:
        """Requests at indices ``start, start+stride, …`` below ``stop`` (None: without end).

        Items are built one at a time as they are taken, so a dispatcher pays a few µs per request and never a
        whole block at once.
        """
        if stride < 1 or start < 0:
            raise ValueError("start must be >= 0 and stride >= 1")
        n_classes = len(self.workload.classes)
        replaying = bool(self._files)
        cursor = [0] * n_classes  # per class: how many of its requests came before, for file replay order
        block = 0
        index = start
        while stop is None or index < stop:
            base = block * PLAN_BLOCK
            if index >= base + PLAN_BLOCK:  # nothing of ours in this block: only the replay cursors move
                if replaying:
                    self._advance(cursor, self._block(block).choice, 0, PLAN_BLOCK)
                block += 1
                continue
            b = self._block(block)
            done = 0  # block positions whose class has been counted in ``cursor``
            while index < base + PLAN_BLOCK and (stop is None or index < stop):
                j = index - base
                if replaying:
                    self._advance(cursor, b.choice, done, j)
                    done = j + 1
                yield self._item(index, b, j, cursor)
                index += stride
            if replaying:
                self._advance(cursor, b.choice, done, PLAN_BLOCK)
            block += 1

    @staticmethod
    def _advance(cursor: list[int], choice: npt.NDArray[np.int64], lo: int, hi: int) -> None:
        """Count the requests at block positions [lo, hi) in their class's replay cursor (they belong to others)."""
        if hi <= lo:
            return
        for k, count in enumerate(np.bincount(choice[lo:hi], minlength=len(cursor)).tolist()):
            cursor[k] += count


class _Block(NamedTuple):
    choice: npt.NDArray[np.int64]  #: class index per position
    choice_list: list[int]
    prompt_len: list[list[int]]  #: per class, per position
    output_len: list[list[int]]
