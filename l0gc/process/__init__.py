"""Process plumbing every long-running command shares: `signals` (stop signals, a second
Ctrl-C) and `buildinfo` (the version and its metric). May import the kernel's lower
layers (`l0gc.errors`, `l0gc.options`, `l0gc.logs`) and prometheus_client."""
