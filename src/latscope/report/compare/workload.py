"""Whether two runs measured the same thing: their workloads (prompt and output lengths, classes, mix) and their
load (arrival process, rates, concurrency) — a comparison of different workloads would credit the server with the
workload's change. Pure functions of ``run.json`` and diagnosis dicts."""

from __future__ import annotations

from typing import Any

#: The workload class fields a comparison requires to be equal.
CLASS_FIELDS = ("weight", "prompt_tokens", "output_tokens", "ignore_eos", "prompt_file")


def _step_text(step: dict[str, Any]) -> str:
    if step.get("kind") == "closed":
        return f"closed loop, concurrency {step.get('concurrency')}"
    if step.get("kind") == "open":
        cap = step.get("max_concurrency")
        burst = f" (burstiness {step.get('burstiness')})" if step.get("process") == "gamma" else ""
        return f"{step.get('process')} arrivals at {step.get('rate_rps')}/s{burst}" + (
            f", max concurrency {cap}" if cap else ""
        )
    return str(step)


def run_workload_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two bench runs' workloads and loads (``run.json`` dicts), one sentence each; empty when
    they ran the same workload."""
    out: list[str] = []
    ca, cb = a.get("config", {}), b.get("config", {})
    classes_a = {c.get("name"): c for c in ca.get("workload", {}).get("classes", [])}
    classes_b = {c.get("name"): c for c in cb.get("workload", {}).get("classes", [])}
    for name in classes_a.keys() - classes_b.keys():
        out.append(f"workload class {name!r} is only in A")
    for name in classes_b.keys() - classes_a.keys():
        out.append(f"workload class {name!r} is only in B")
    for name in sorted(classes_a.keys() & classes_b.keys(), key=str):
        for key in CLASS_FIELDS:
            va, vb = classes_a[name].get(key), classes_b[name].get(key)
            if va != vb:
                out.append(f"class {name!r} {key.replace('_', ' ')}: A {va}, B {vb}")
    steps_a, steps_b = ca.get("steps", []), cb.get("steps", [])
    if len(steps_a) != len(steps_b):
        out.append(f"A has {len(steps_a)} step(s), B {len(steps_b)}")
    for index, (sa, sb) in enumerate(zip(steps_a, steps_b, strict=False)):
        if sa != sb:
            out.append(f"step {index}: A {_step_text(sa)}, B {_step_text(sb)}")
    if ca.get("dialect") != cb.get("dialect"):
        out.append(f"API dialect: A {ca.get('dialect')}, B {cb.get('dialect')}")
    return out


def diagnosis_workload_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between the experiments two diagnoses ran (``--quick``, ``--only``), one sentence each."""
    out: list[str] = []
    if bool(a.get("quick")) != bool(b.get("quick")):
        out.append(f"--quick: A {bool(a.get('quick'))}, B {bool(b.get('quick'))} (the experiments' sizes differ)")
    checked_a, checked_b = set(a.get("checked") or []), set(b.get("checked") or [])
    if checked_a and checked_b and checked_a != checked_b:
        only_a, only_b = sorted(checked_a - checked_b), sorted(checked_b - checked_a)
        out.append(f"checks run: only in A {only_a or '–'}, only in B {only_b or '–'} (--only)")
    return out
