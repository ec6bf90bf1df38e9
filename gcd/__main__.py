"""`python -m gcd`: the gcd command line."""

from gcd.cli.main import main

raise SystemExit(main())
