"""``latscope lab`` as a child process: ready file, URL, TLS certificate, clean exit on Ctrl-C."""

from __future__ import annotations

import ssl

import httpx
import pytest

from latscope.lab.process import LabProcess, LabStartError


def test_lab_process_serves_until_stopped_and_exits_cleanly() -> None:
    lab = LabProcess(profile="naive", zero_cost=True)
    url = lab.start()
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        response = httpx.post(
            url + "/chat/completions",
            json={"model": "lab-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        assert response.status_code == 200
        assert response.headers["server"] == "latscope-lab"
    finally:
        code = lab.stop()
    assert code == 0  # SIGINT is the lab's Ctrl-C: a clean exit, not a traceback


def test_lab_process_with_tls_hands_over_the_certificate() -> None:
    with LabProcess(tls=True, zero_cost=True) as lab:
        assert lab.url is not None and lab.url.startswith("https://")
        assert lab.cert_path is not None and lab.cert_path.exists()
        context = ssl.create_default_context(cafile=str(lab.cert_path))
        response = httpx.get(lab.url + "/models", verify=context)
        assert response.status_code == 200
        cert_path = lab.cert_path
    assert not cert_path.exists()  # removed when the lab stopped


async def test_lab_process_works_as_an_async_context_manager() -> None:
    async with LabProcess(zero_cost=True) as lab, httpx.AsyncClient() as http:
        assert lab.url is not None
        response = await http.get(lab.url.removesuffix("/v1") + "/health")
        assert response.json()["status"] == "ok"


def test_a_lab_that_cannot_start_reports_why() -> None:
    with pytest.raises(LabStartError, match="gremlins"):
        LabProcess(faults=("gremlins",), ready_timeout_s=20).start()
