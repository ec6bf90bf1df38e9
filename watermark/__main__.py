"""`python -m watermark`: the `watermark` command (see `watermark.cli`)."""

from watermark.cli import main

raise SystemExit(main())
