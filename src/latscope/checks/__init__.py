"""latscope.checks."""
