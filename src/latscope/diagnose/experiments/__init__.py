"""The experiments, one module per family: each sends a bounded number of requests and returns its evidence.

:data:`EXPERIMENTS` is the registry, family → :class:`~latscope.diagnose.experiments.base.Experiment`, in the order
they run (request-path order); the checks of a family (:data:`latscope.checks.CHECKS`) read its evidence. Adding a
finding is one experiment module with an ``EXPERIMENT`` registered here (or a new check on an existing family), one
check module, one lab fault.

* :mod:`~latscope.diagnose.experiments.baseline` — the typical request and TTFT vs prompt length (always first, not in
  the registry: every finding's severity is measured against it)
* :mod:`~latscope.diagnose.experiments.connection` — DNS lookups, reuse, TLS resumption, ALPN, HTTP/1.1 under
  concurrency
* :mod:`~latscope.diagnose.experiments.caching` — a request, a varied one and the first again: a cache in front?
* :mod:`~latscope.diagnose.experiments.tracecontext` — one request with a fresh ``traceparent``: is it propagated?
* :mod:`~latscope.diagnose.experiments.headers` — the same request with growing padding headers
* :mod:`~latscope.diagnose.experiments.parsing` — server time vs request body size
* :mod:`~latscope.diagnose.experiments.multimodal` — an image part of growing size vs the same bytes as text
* :mod:`~latscope.diagnose.experiments.queueing` — a short prompt alone and behind long ones
* :mod:`~latscope.diagnose.experiments.batching` — short requests alone and in staggered pairs
* :mod:`~latscope.diagnose.experiments.prefill` — TTFT vs prompt length towards the context limit
* :mod:`~latscope.diagnose.experiments.prefixcache` — a long prefix sent twice with new suffixes, against fresh
  prompts of its size
* :mod:`~latscope.diagnose.experiments.saturation` — identical short requests at growing concurrency
* :mod:`~latscope.diagnose.experiments.kvcache` — long streams alone and many at once
* :mod:`~latscope.diagnose.experiments.sampling` — the same prompt decoded greedily and with sampling parameters
* :mod:`~latscope.diagnose.experiments.streaming` — per-read analysis under different ACK behaviours and lengths
* :mod:`~latscope.diagnose.experiments.gateway` — short requests at a low rate, then at once
* :mod:`~latscope.diagnose.experiments.overhead` — with ``--direct``: the same requests through the target and to its
  upstream, in pairs
* :mod:`~latscope.diagnose.experiments.ratelimit` — a short probe, with every rate-limit refusal the run met (last:
  it reads what the others met)
"""

from __future__ import annotations

from latscope.diagnose.experiments import (
    batching,
    caching,
    connection,
    gateway,
    headers,
    kvcache,
    multimodal,
    overhead,
    parsing,
    prefill,
    prefixcache,
    queueing,
    ratelimit,
    sampling,
    saturation,
    streaming,
    tracecontext,
)
from latscope.diagnose.experiments.base import Experiment, Prior

EXPERIMENTS: dict[str, Experiment] = {}
"""Every registered experiment by family, in running order."""


def register_experiment(experiment: Experiment) -> None:
    """Add (or replace) an experiment; a new family runs after the ones registered before it."""
    EXPERIMENTS[experiment.family] = experiment


for _module in (
    connection,
    caching,
    tracecontext,
    headers,
    parsing,
    multimodal,
    queueing,
    batching,
    prefill,
    prefixcache,
    saturation,
    kvcache,
    sampling,
    streaming,
    gateway,
    overhead,
    ratelimit,
):
    register_experiment(_module.EXPERIMENT)

__all__ = ["EXPERIMENTS", "Experiment", "Prior", "register_experiment"]
