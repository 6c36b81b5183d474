"""latscope.lab."""
