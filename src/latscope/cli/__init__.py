"""Command-line interface: one module per subcommand, each exporting a click ``command``."""
