"""Two faults of `gcd chaos` that come from outside the fleet (issue 25, findings 2 and 3).

- `duplicate_start` (``publisher-dup-start``): a second `watermark serve` with a running
  publisher's --partitions and --http-port (in use), as a hurried operator would start
  it. It must exit 2 and change no partition record; otherwise (it adopted first, as it
  once did) the running publisher turns stale and its writers get 404 ``not_hosted``.
- `forged_member` (``forged-member``, replicated publishers only): someone who can write
  ``{ns}/replicas/`` announces a member at ``http://127.0.0.2:PORT`` (outside the
  replicas' fleet) on a lease it keeps alive, and overwrites the claims of two
  partitions with its own. No replica may redirect a writer there nor assign it a
  partition: a listener at that address records every request, and any request (a
  writer's token sent to it) is a problem of the run. The heal revokes the lease.

Each returns the fault's target and its heal, as the nemesis's faults do; what went wrong
is appended to `Cluster.problems`, which fails the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from l0gc.contract.kv import Put
from l0gc.contract.members import ClaimRecord, MemberRecord
from l0gc.errors import L0gcError
from l0lab.chaos.cluster import NAMESPACE, Cluster
from l0lab.testing.local_servers import free_port
from l0lab.testing.procs import child_env

__all__ = ["duplicate_start", "forged_member"]

Heal = Callable[[], Awaitable[None]]
_FORGED_ID = "zz-forged"


async def _owners(cluster: Cluster) -> dict[str, tuple[str | None, int]]:
    assert cluster.store is not None
    records = await cluster.store.list_partitions()
    return {
        name: (record.owner, record.owner_epoch)
        for name, record in records.items()
        if not isinstance(record, L0gcError)
    }


async def _nothing() -> None:
    return None


async def duplicate_start(cluster: Cluster, rng: random.Random) -> tuple[str, Heal]:
    """Start a duplicate of a running publisher on its port; check it changed nothing."""
    running = sorted(name for name, pub in cluster.publishers.items() if pub.child.alive)
    name = rng.choice(running)
    pub = cluster.publishers[name]
    argv = cluster.serve_argv(pub)
    argv[argv.index("--owner-id") + 1] = f"{pub.owner_id}-dup"
    before = await _owners(cluster)
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    try:
        _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    except TimeoutError:
        process.kill()
        await process.wait()
        err = b"(still running after 60 s)"
    after = await _owners(cluster)
    mine = {p for p, owner in cluster.routes.items() if owner == name}
    if cluster.config.replicated:  # the others' records move with the leases meanwhile
        changed = sorted(p for p, (owner, _) in after.items() if owner == f"{pub.owner_id}-dup")
    else:
        changed = sorted(p for p in mine if before.get(p) != after.get(p))
    if process.returncode != 2 or changed:
        cluster.problems.append(
            f"a duplicate `watermark serve` of {name} on its port exited {process.returncode} "
            f"(expected 2) and changed the records of {changed}: "
            f"{err.decode(errors='replace')[-300:]}"
        )
    return f"{name} (duplicate start, exit {process.returncode})", _nothing


async def forged_member(cluster: Cluster, rng: random.Random) -> tuple[str, Heal]:
    """Announce a member outside the fleet with two claims; its listener must get nothing."""
    kv = cluster.kv
    assert kv is not None
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path_qs[:100]}")
        return web.json_response({"token": "forged", "granted": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.2", port).start()
    address = f"http://127.0.0.2:{port}"
    lease = await kv.lease_grant(5)
    stop = asyncio.Event()

    async def keep() -> None:
        while not stop.is_set():
            with contextlib.suppress(L0gcError):
                await kv.lease_refresh(lease)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    keeper = asyncio.create_task(keep())
    partitions = sorted(cluster.routes)
    taken = rng.sample(partitions, k=min(2, len(partitions)))
    prefix = f"{NAMESPACE}/replicas/"
    member = MemberRecord(_FORGED_ID, address, frozenset(partitions)).encode(time.time())
    claim = ClaimRecord(_FORGED_ID, lease).encode()
    await kv.txn(
        [],
        [
            Put(prefix + "members/" + _FORGED_ID, member, lease),
            *(Put(prefix + "claims/" + p, claim, lease) for p in taken),
        ],
    )

    async def heal() -> None:
        stop.set()
        await keeper
        with contextlib.suppress(L0gcError):
            await kv.lease_revoke(lease)
        await runner.cleanup()
        if seen:
            cluster.problems.append(
                f"the forged member at {address} (outside the fleet) received {len(seen)} "
                f"request(s) with writers' tokens, e.g. {seen[:3]}"
            )

    return f"forged member {address} claiming {', '.join(taken)}", heal
