"""The `watermark` command: one module per subcommand, as `gcd.cli` has.

Lives here: `main` (the parser, option resolution, dispatch, exit codes and output),
`serve` (`watermark serve`: flags to a `watermark.service.runner.PublisherRunner`),
`epoch` (`epoch get|advance`), `partition` (`partition register|deregister|list|show`),
`repair` (`partition repair`), `output` (the options and JSON version every command
shares). Each module parses, calls and prints; nothing else.

May import: every lower watermark layer (`errors`, `core`, `options`, `logs`, `etcd`,
`service`, `api`). Never gcd: `watermark namespace` is wired in `watermark.__main__`.
"""
