"""latscope.report."""
