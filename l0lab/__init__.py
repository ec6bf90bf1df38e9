"""l0lab: l0gc's lab, beside the product and never inside it.

Everything that runs l0gc on one machine to show or test it, rather than to collect
garbage: local servers, the fault proxy, the in-memory stores, the deterministic
simulation, the chaos harness and the demo workload. It is a distribution of its own
(`l0lab/pyproject.toml`, installed into the dev venv by scripts/bootstrap.sh), so the
l0gc wheel and the image carry only `gcd` and `watermark`. The commands that run it,
`gcd demo`, `gcd chaos`, `gcd simulate` and `gcd dev`, stay in `gcd.cli` and import it
when they run (`gcd.cli.lab`); without it they say what to install.

Layers, lowest first; a layer imports only the layers below it and any of `gcd` and
`watermark`, which never import this package (tests/test_layers.py):

- `l0lab.testing`: local servers (etcd, moto, SeaweedFS, Azurite, the GCS emulator,
  replicated `watermark serve`, a Spark cluster), the fault proxy, child processes,
  the in-memory object store and the ledger of referenced objects.
- `l0lab.sim`: the deterministic simulation (`gcd simulate`, `--exhaustive`).
- `l0lab.demo`: the demo workload, its servers and its check (`gcd demo`).
- `l0lab.chaos`: real processes under a nemesis, checked (`gcd chaos`).

May import: `gcd` and `watermark`, any layer but `gcd.cli` and `gcd.__main__`: the
commands import the lab, not the other way round.
"""
