"""The `gcd` command line: `gcd.cli.main.main` dispatches to one module per subcommand.

May import: every other layer of gcd and watermark (it is the top of gcd).
"""
