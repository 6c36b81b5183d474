"""latscope.wire."""
