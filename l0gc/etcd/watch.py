"""One etcd Watch stream, read to a point: the events up to etcd's progress answer.

`EtcdKV.watch_prefix` opens the gRPC Watch stream on its current channel; this object
reads it. `sync()` asks etcd for a progress report and returns the events that arrived
before it (etcd sends a watch's events in revision order, whole revisions per answer)
and the revision up to which every change has come. A compacted start revision, a
cancel, the end of the stream, a gRPC error, an event older than a revision already
vouched for, or no answer within the call timeout ends the watch with `WatchLost`: the
follower (`l0gc.etcd.follow`) then reads the namespace in full.

Which revision a sync vouches for depends on the server (docs/internals/kernel.md,
`l0gc.etcd.watch`). etcd before 3.5.13 answers a progress request with its current
revision on a path that is not ordered with the watch's events: the answer can overtake
events queued for the stream (fixed in 3.5.8, etcd issue 15220) and, for a watch created
at a past revision, the events etcd has yet to replay to it (3.5.13, etcd PR 17566). On
such a server a sync vouches only for the last event it delivered (events of one watch
always come in order); from 3.5.13 on (and 3.6), for etcd's answer.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import grpc
import grpc.aio
from aetcd import rpc

from l0gc.contract.kv import Change
from l0gc.errors import WatchLost

__all__ = ["ORDERED_PROGRESS_SINCE", "EtcdWatch", "progress_is_ordered"]

ORDERED_PROGRESS_SINCE = (3, 5, 13)
"""The first etcd release whose progress answers are ordered with a watch's events."""
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def progress_is_ordered(version: str) -> bool:
    """Whether an etcd server reporting `version` (its Status answer, e.g. "3.5.1")
    orders progress answers with events; False for anything it cannot read."""
    found = _VERSION.match(version)
    if found is None:
        return False
    major, minor, patch = (int(part) for part in found.groups())
    return (major, minor, patch) >= ORDERED_PROGRESS_SINCE


class EtcdWatch:
    """One Watch stream of `prefix` from `start_revision` (see the module docstring)."""

    def __init__(
        self,
        endpoint: str,
        prefix: str,
        call: Any,
        timeout_s: float,
        *,
        start_revision: int,
        ordered_progress: bool,
    ) -> None:
        self._endpoint = endpoint
        self._prefix = prefix
        self._call = call
        self._timeout_s = timeout_s
        self._ordered_progress = ordered_progress
        self._vouched = start_revision - 1  # every change up to it has come
        self.answered = 0
        """The revision of etcd's last progress answer (`l0gc.contract.kv.PrefixWatch`)."""

    def _lost(self, reason: str) -> WatchLost:
        return WatchLost(self._endpoint, f"watch {self._prefix}: {reason}")

    async def sync(self) -> tuple[list[Change], int]:
        """Events since the last sync, and the revision up to which every change has
        come (see the module docstring)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._sync()
        except grpc.aio.AioRpcError as exc:
            raise self._lost(f"{exc.code().name} {exc.details()}") from exc
        except asyncio.InvalidStateError:  # the call ended (e.g. its member died) unread
            raise self._lost("the stream has ended") from None
        except TimeoutError:
            raise self._lost(f"no progress answer within {self._timeout_s:g} s") from None

    async def _sync(self) -> tuple[list[Change], int]:
        changes: list[Change] = []
        await self._call.write(rpc.WatchRequest(progress_request=rpc.WatchProgressRequest()))
        while True:
            response = await self._call.read()
            if response is grpc.aio.EOF:
                raise self._lost("the stream ended")
            if response.compact_revision:
                raise self._lost(f"compacted at revision {response.compact_revision}")
            if response.canceled:
                raise self._lost(f"cancelled ({response.cancel_reason or 'no reason'})")
            if response.events:
                first = response.events[0].kv.mod_revision
                if first <= self._vouched:
                    raise self._lost(
                        f"an event at revision {first} came after the watch had vouched "
                        f"for revision {self._vouched}"
                    )
                changes.extend(
                    Change(
                        event.kv.key.decode("utf-8", "surrogateescape"),
                        None if event.type == rpc.Event.EventType.DELETE else bytes(event.kv.value),
                        event.kv.mod_revision,
                    )
                    for event in response.events
                )
                self._vouched = changes[-1].revision  # a whole revision per answer
            elif not response.created:  # the progress answer
                self.answered = response.header.revision
                if self._ordered_progress:
                    self._vouched = max(self._vouched, response.header.revision)
                return changes, self._vouched

    async def close(self) -> None:
        """Cancel the stream."""
        self._call.cancel()
