"""``latscope lab --edge nginx``: the command serves through a real nginx, with the edge faults as its directives."""

from __future__ import annotations

import ssl

import httpx

from latscope.lab.process import LabProcess
from tests.edge.support import needs_nginx

CHAT = {"model": "lab-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@needs_nginx
def test_the_lab_command_serves_through_nginx_when_asked() -> None:
    with LabProcess(tls=True, zero_cost=True, args=["--edge", "nginx", "--fault", "proxy-buffering"]) as lab:
        assert lab.url is not None and lab.cert_path is not None
        context = ssl.create_default_context(cafile=str(lab.cert_path))
        response = httpx.post(lab.url + "/chat/completions", json={**CHAT, "stream": True}, verify=context)
    assert response.status_code == 200
    assert response.headers["server"].startswith("nginx")  # nginx answered, not the lab's own server
    assert "x-accel-buffering" not in response.headers  # the buffering fault is nginx's now
    assert response.text.rstrip().endswith("data: [DONE]")


def test_the_lab_command_serves_by_itself_by_default() -> None:
    with LabProcess(zero_cost=True, args=["--prefill-ms-per-token", "0.01", "--batch-trigger", "2"]) as lab:
        assert lab.url is not None
        response = httpx.post(lab.url + "/chat/completions", json=CHAT)
    assert response.status_code == 200 and response.headers["server"] == "latscope-lab"
