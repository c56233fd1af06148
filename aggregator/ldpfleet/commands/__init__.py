"""CLI subcommand families."""
