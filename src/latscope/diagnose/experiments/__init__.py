"""The experiments, one module per family: each sends a bounded number of requests and returns its evidence.

* :mod:`~latscope.diagnose.experiments.baseline` — the typical request and TTFT vs prompt length
* :mod:`~latscope.diagnose.experiments.connection` — reuse, TLS resumption, ALPN, HTTP/1.1 under concurrency
* :mod:`~latscope.diagnose.experiments.parsing` — server time vs request body size
* :mod:`~latscope.diagnose.experiments.queueing` — a short prompt alone and behind long ones
* :mod:`~latscope.diagnose.experiments.streaming` — per-read analysis under different ACK behaviours and lengths
"""
