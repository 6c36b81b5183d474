"""latscope.signals."""
