"""`l0lab.testing.faultproxy.FaultProxy` in a process of its own, driven over stdin/stdout.

    .venv/bin/python -m bench.proxy_child UPSTREAM_URL DELAY_S

Prints {"port": P} once listening on 127.0.0.1. Then reads commands, one per line:
"counts" prints {"list": n, "delete": n, "other": n} (requests seen since the last
"reset"), "reset" zeroes the counters and prints {}, and end of input stops the proxy.

A process of its own keeps the proxy's CPU off the interpreter (and GIL) that runs
the moto server, so the delay it adds is the only thing it changes.
"""

from __future__ import annotations

import asyncio
import json
import sys

from l0lab.testing.faultproxy import FaultConfig, FaultProxy


async def _serve(upstream: str, delay_s: float) -> None:
    loop = asyncio.get_running_loop()
    async with FaultProxy(upstream, FaultConfig(delay_s=delay_s)) as proxy:
        sys.stdout.write(json.dumps({"port": proxy.port}) + "\n")
        sys.stdout.flush()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            command = line.strip()
            if not line:
                return
            if command == "counts":
                answer: dict[str, int] = {
                    op: proxy.requests[op] for op in ("list", "delete", "other")
                }
            elif command == "reset":
                proxy.requests.clear()
                answer = {}
            else:
                answer = {"error": 1}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


def main() -> int:
    """Run the proxy until stdin closes."""
    upstream, delay = sys.argv[1], float(sys.argv[2])
    asyncio.run(_serve(upstream, delay))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
