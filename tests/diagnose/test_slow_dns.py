"""``slow-dns`` end to end, without the internet.

On loopback: the lab at 127.0.0.1 resolves nothing (not tested, and the reason says so); at ``localhost`` the name
comes from /etc/hosts (clear).

Across a network path (tests/support/netpath.py, 5 ms each way: a TCP connect takes 10 ms): the client namespace
gets a resolver of its own, a DNS responder on the namespace's loopback that answers ``lab.latscope.test`` with the
lab's address after an injected delay, and a resolv.conf naming it (``ip netns exec`` puts /etc/netns/<ns>/resolv.conf
over /etc/resolv.conf). ``latscope diagnose --quick --only slow-dns`` runs in the namespace as a process of its own,
so its ``getaddrinfo`` is glibc's stub resolver, which keeps no cache: every new connection asks the responder again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import latscope
from latscope.diagnose import diagnose
from latscope.findings import Clear, NotTested, Severity
from latscope.lab.app import Lab
from tests.diagnose.truth import TEST_COST
from tests.support.diagnosis import explain
from tests.support.dns_responder import DnsResponder
from tests.support.netpath import NetworkPath, network_path

pytestmark = pytest.mark.timeout(180)

NAME = "lab.latscope.test"
#: One-way delay of the path to the lab, ms: its TCP connect (the check's control) takes a round trip, 10 ms.
ONE_WAY_MS = 5.0
#: What the responder waits before each answer, ms: three round trips to the server.
INJECTED_DELAY_MS = 30.0
#: The measured cost may be off the injected delay by this share: glibc's own work and the worker thread's hop add
#: a fraction of a millisecond, a busy host a little more.
REL_TOLERANCE = 0.25
#: How long one diagnosis may take, s.
DIAGNOSE_TIMEOUT_S = 120.0


# -- on loopback ----------------------------------------------------------------------------------------------------
async def test_the_lab_at_an_ip_address_is_not_tested() -> None:
    async with Lab(cost=TEST_COST) as lab:
        result = await diagnose(lab.url, quick=True, only="slow-dns")
    outcome = result.outcome("slow-dns")
    assert isinstance(outcome, NotTested), explain(result)
    assert "IP address" in outcome.reason and "127.0.0.1" in outcome.reason


async def test_localhost_from_the_hosts_file_is_clear() -> None:
    async with Lab(cost=TEST_COST) as lab:
        result = await diagnose(lab.url.replace("127.0.0.1", "localhost"), quick=True, only="slow-dns")
    outcome = result.outcome("slow-dns")
    assert isinstance(outcome, Clear), explain(result)
    assert outcome.evidence["host"] == "localhost" and outcome.evidence["lookups"] >= 4


# -- across a network path, with a resolver of the test's own ---------------------------------------------------------
@contextlib.contextmanager
def resolv_conf(namespace: str, nameserver: str) -> Iterator[Path]:
    """/etc/netns/<namespace>/resolv.conf naming ``nameserver`` (one try, 2 s), removed afterwards."""
    directory = Path("/etc/netns") / namespace
    directory.mkdir(parents=True, exist_ok=False)
    try:
        conf = directory / "resolv.conf"
        conf.write_text(f"nameserver {nameserver}\noptions timeout:2 attempts:1\n")
        yield conf
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def _diagnose_by_name(net: NetworkPath, lab: Lab) -> dict[str, object]:
    """``latscope diagnose http://lab.latscope.test:PORT --quick --only slow-dns --json -`` run in the namespace;
    the slow-dns outcome of its JSON."""
    url = f"http://{NAME}:{lab.port}/v1"
    argv = [sys.executable, "-m", "latscope.cli.main", "diagnose", url, "--quick", "--only", "slow-dns", "--json", "-"]
    # the process runs the latscope this test imported
    source = str(Path(latscope.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH")) if p)}
    child = net.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = await asyncio.to_thread(child.communicate, timeout=DIAGNOSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        await asyncio.to_thread(child.communicate)
        raise
    assert child.returncode == 0, err
    data = orjson.loads(out)
    found = [
        {**outcome, "kind": kind}
        for kind in ("findings", "clear", "not_tested", "inconclusive")
        for outcome in data[kind]
        if outcome["id"] == "slow-dns"
    ]
    assert len(found) == 1, data
    return found[0]


async def _run(delay_ms: float, *, slow_first_only: bool = False) -> tuple[dict[str, object], DnsResponder]:
    with network_path(ONE_WAY_MS) as net:
        responder = DnsResponder({NAME: net.server_host}, delay_s=delay_ms / 1000.0, slow_first_only=slow_first_only)
        # started from the namespace's own thread: its socket is on the namespace's loopback
        await net.run(responder.start("127.0.0.1", 53))
        try:
            with resolv_conf(net.namespace, "127.0.0.1"):
                async with Lab(cost=TEST_COST, host=net.server_host) as lab:
                    outcome = await _diagnose_by_name(net, lab)
        finally:
            await net.run(responder.stop())
    return outcome, responder


async def test_a_resolver_slower_than_the_server_round_trip_is_a_finding_costing_its_delay() -> None:
    outcome, responder = await _run(INJECTED_DELAY_MS)
    assert outcome["kind"] == "findings", outcome
    evidence = outcome["evidence"]
    assert isinstance(evidence, dict)
    cost = outcome["cost_ms"]
    assert isinstance(cost, float)
    assert abs(cost - INJECTED_DELAY_MS) <= REL_TOLERANCE * INJECTED_DELAY_MS, outcome
    assert outcome["severity"] != str(Severity.LOW), outcome
    assert evidence["repeats_cached"] is False  # glibc's stub resolver asked again for every new connection
    # the control: the connection's own connect, about one round trip of the path
    assert 0.8 * 2 * ONE_WAY_MS <= evidence["connect_ms"] <= 1.5 * 2 * ONE_WAY_MS, outcome
    # every lookup the check counted went to the responder (the run asked more: model list, first contact, baseline)
    assert responder.lookups_of(NAME) >= evidence["lookups"] >= 4


async def test_a_resolver_that_answers_at_once_is_clear() -> None:
    outcome, responder = await _run(0.0)
    assert outcome["kind"] == "clear", outcome
    evidence = outcome["evidence"]
    assert isinstance(evidence, dict)
    assert evidence["lookup_ms"] < evidence["connect_ms"]
    assert responder.lookups_of(NAME) >= evidence["lookups"] >= 4


async def test_a_caching_resolver_is_clear_though_its_first_answer_was_slow() -> None:
    # only the first query of the run (the model list) waits; the connection experiment's lookups are repeats
    outcome, responder = await _run(INJECTED_DELAY_MS, slow_first_only=True)
    assert outcome["kind"] == "clear", outcome
    evidence = outcome["evidence"]
    assert isinstance(evidence, dict)
    assert evidence["lookup_ms"] < INJECTED_DELAY_MS / 3
    assert responder.lookups_of(NAME) >= evidence["lookups"] >= 4
