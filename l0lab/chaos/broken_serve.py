"""`watermark serve` built with a deliberately broken part, for `gcd chaos --broken-build`.

    python -m l0lab.chaos.broken_serve BUILD serve [watermark serve options...]

Runs the real `watermark serve` (`watermark.cli.main.main`) with one of its parts swapped for
a broken variant of the simulation (`l0lab.sim.variants`), as `watermark.service.runner.ServeParts`
allows: nothing is patched, and nothing but the chaos harness starts this module. A
checker that never fails proves nothing: `gcd chaos` must fail on every build here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final

from l0lab.chaos.config import BROKEN_BUILDS
from l0lab.sim.variants import NoDrainGuard, OwnerBlindStore
from watermark.cli.main import main as watermark_main
from watermark.service.runner import ServeParts

__all__ = ["BUILDS", "main"]

BUILDS: Final[dict[str, ServeParts]] = {
    "no-drain-slide": ServeParts(guard_class=NoDrainGuard),
    "owner-blind-publisher": ServeParts(store_class=OwnerBlindStore),
}
assert set(BUILDS) == set(BROKEN_BUILDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `watermark` with the broken build named first."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in BUILDS:
        sys.stderr.write(
            f"usage: python -m l0lab.chaos.broken_serve {{{','.join(BUILDS)}}} serve [options]\n"
        )
        return 2
    return watermark_main(args[1:], parts=BUILDS[args[0]])


if __name__ == "__main__":
    raise SystemExit(main())
