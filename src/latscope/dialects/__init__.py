"""latscope.dialects."""
