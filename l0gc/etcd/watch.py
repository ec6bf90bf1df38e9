"""One etcd Watch stream, read to a point: the events up to etcd's progress answer.

`EtcdKV.watch_prefix` opens the gRPC Watch stream on its current channel; this object
reads it. `sync()` asks etcd for a progress report and returns the events that arrived
before it (etcd sends a watch's events in revision order, whole revisions per answer)
and the revision of the answer. A compacted start revision, a cancel, the end of the
stream, a gRPC error or no answer within the call timeout ends the watch with
`WatchLost`: the follower (`l0gc.etcd.follow`) then reads the namespace in full.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
from aetcd import rpc

from l0gc.contract.kv import Change
from l0gc.errors import WatchLost

__all__ = ["EtcdWatch"]


class EtcdWatch:
    """One Watch stream of `prefix` (see the module docstring)."""

    def __init__(self, endpoint: str, prefix: str, call: Any, timeout_s: float) -> None:
        self._endpoint = endpoint
        self._prefix = prefix
        self._call = call
        self._timeout_s = timeout_s

    def _lost(self, reason: str) -> WatchLost:
        return WatchLost(self._endpoint, f"watch {self._prefix}: {reason}")

    async def sync(self) -> tuple[list[Change], int]:
        """Events since the last sync, and the revision of etcd's progress answer."""
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
                changes.extend(
                    Change(
                        event.kv.key.decode("utf-8", "surrogateescape"),
                        None if event.type == rpc.Event.EventType.DELETE else bytes(event.kv.value),
                        event.kv.mod_revision,
                    )
                    for event in response.events
                )
            elif not response.created:
                return changes, response.header.revision  # the progress answer

    async def close(self) -> None:
        """Cancel the stream."""
        self._call.cancel()
