"""Long-running fuzz targets for what reads bytes from servers: the SSE parser, every dialect's stream decoder, the
error-body decoder and the client's HTTP/1.1 reader (over a real loopback socket).

``python -m tests.fuzz TARGET SECONDS`` runs one target for SECONDS (``all`` for each in turn); CI runs each for a
few seconds (tests/fuzz/test_fuzz.py). Inputs are hypothesis-generated: real servers' captures
(tests/fixtures/real, tests/fixtures/ollama) and the lab's streams in every dialect (tests/fixtures/lab: the
``anthropic``, ``responses`` and ``tgi`` targets) mutated byte by byte, and arbitrary bytes, fed in random splits.
A target fails on any exception other than the ones its reader is documented to raise for bad input, and on a result
that breaks its contract (an event that is not text, a request that fails with ``internal``).
"""
