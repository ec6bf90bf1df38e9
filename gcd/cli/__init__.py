"""The `gcd` command line: `gcd.cli.main.main` dispatches to one module per subcommand."""

__all__: list[str] = []
