"""Workload classes, mixes, prompt files and the reproducible plan."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

from latscope.load.lengths import LengthDist, parse_length
from latscope.load.workload import (
    Plan,
    Workload,
    WorkloadClass,
    WorkloadSpecError,
    load_prompt_file,
    parse_class,
    prompt_seed,
    split_top_level,
)


def test_split_top_level_protects_parentheses() -> None:
    parts = split_top_level("weight=1,prompt=uniform(1,2),ignore_eos")
    assert parts == ["weight=1", "prompt=uniform(1,2)", "ignore_eos"]


def test_parse_class_reads_every_key() -> None:
    cls = parse_class("long:weight=0.2,prompt=lognormal(4000,0.3,max=8000),output=256,ignore_eos")
    assert cls.name == "long" and cls.weight == 0.2 and cls.ignore_eos
    assert cls.prompt_tokens == parse_length("lognormal(4000,0.3,max=8000)")
    assert cls.output_tokens == LengthDist.fixed(256)


@pytest.mark.parametrize("text", ["noname", ":weight=1", "a:colour=red", "a:weight=-1", "a:prompt=normal(1)"])
def test_bad_classes_raise(text: str) -> None:
    with pytest.raises(WorkloadSpecError):
        parse_class(text)


def test_class_names_must_be_unique() -> None:
    with pytest.raises(WorkloadSpecError):
        Workload((WorkloadClass("a"), WorkloadClass("a")))


def test_the_plan_is_reproducible_from_the_seed() -> None:
    w = Workload((parse_class("a:prompt=normal(100,30),output=uniform(10,50)"),), seed=3)
    first = list(itertools.islice(Plan(w).iterate(), 500))
    again = list(itertools.islice(Plan(w).iterate(), 500))
    other = list(itertools.islice(Plan(Workload(w.classes, seed=4)).iterate(), 500))
    assert first == again
    assert first != other


def test_the_mix_follows_the_weights() -> None:
    w = Workload((parse_class("short:weight=0.8,prompt=100"), parse_class("long:weight=0.2,prompt=4000")), seed=1)
    counts = Counter(p.class_name for p in itertools.islice(Plan(w).iterate(), 20_000))
    assert abs(counts["short"] / 20_000 - 0.8) < 0.01
    lengths = {p.class_name: p.prompt_tokens for p in itertools.islice(Plan(w).iterate(), 200)}
    assert lengths == {"short": 100, "long": 4000}


def test_worker_strides_partition_the_plan() -> None:
    w = Workload((parse_class("a:prompt=normal(100,30)"), parse_class("b:weight=2,prompt=uniform(5,9)")), seed=9)
    whole = list(Plan(w).iterate(stop=9000))  # crosses plan blocks
    parts = [list(Plan(w).iterate(start=k, stride=3, stop=9000)) for k in range(3)]
    assert sorted((p for part in parts for p in part), key=lambda p: p.request_id) == whole
    assert [p.request_id for p in parts[1][:3]] == [1, 4, 7]


def test_prompt_file_replays_in_order_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        '{"prompt": "one"}\n\n'
        '{"messages": [{"role": "user", "content": "two"}], "max_tokens": 7, "class": "greet"}\n'
        '{"prompt": "three"}\n'
    )
    w = Workload.single(output_tokens=LengthDist.fixed(50), prompt_file=str(path), name="replay")
    plan = list(Plan(w).iterate(stop=5))
    assert [p.prompt for p in plan] == ["one", None, "three", "one", None]
    assert plan[1].messages == [{"role": "user", "content": "two"}]
    assert [p.max_tokens for p in plan[:3]] == [50, 7, 50]
    assert [p.class_name for p in plan[:3]] == ["replay", "greet", "replay"]
    assert all(p.prompt_tokens is None for p in plan)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("not json\n", ":1: not JSON"),
        ('{"x": 1}\n', "needs 'prompt'"),
        ('{"prompt": "a"}\n{"prompt": 5}\n', ":2: 'prompt' must be a string"),
        ('{"prompt": "a", "max_tokens": 0}\n', "positive integer"),
        ("\n", "has no prompts"),
    ],
)
def test_bad_prompt_files_name_the_line(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(WorkloadSpecError, match=needle):
        load_prompt_file(path)


def test_prompt_seeds_differ_per_request_and_per_run_seed() -> None:
    seeds = {prompt_seed(0, i) for i in range(1000)} | {prompt_seed(1, i) for i in range(1000)}
    assert len(seeds) == 2000


def test_workload_dicts_round_trip() -> None:
    w = Workload((parse_class("a:weight=2,prompt=normal(100,30),output=uniform(1,9),ignore_eos"),), seed=11)
    assert Workload.from_dict(w.to_dict()) == w
