"""latscope.diagnose."""
