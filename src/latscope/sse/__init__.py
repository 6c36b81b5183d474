"""latscope.sse."""
