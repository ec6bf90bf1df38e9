"""The `KV` protocol on a real etcd (v3 gRPC API), through aetcd's generated stubs.

Design notes: docs/internals/kernel.md, `l0gc.etcd.client`.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio
import structlog
from aetcd import rpc

from l0gc.contract.kv import (
    Compare,
    Delete,
    KeyValue,
    Put,
    RangeFold,
    RangeResult,
    TxnResult,
)
from l0gc.errors import ConfigError, EtcdUnavailable, LeaseExpired, WatchLost
from l0gc.etcd.stagger import first_ready
from l0gc.etcd.watch import EtcdWatch, progress_is_ordered

__all__ = ["CONNECT_STAGGER_S", "DEFAULT_PAGE_SIZE", "PAGE_TARGET_BYTES", "EtcdKV"]

CONNECT_STAGGER_S = 0.25
"""How long a connect waits for one endpoint before trying the next one as well: a
loopback or same-zone etcd is ready in milliseconds (`EtcdKV._open_first`)."""
DEFAULT_PAGE_SIZE = 2000
PAGE_TARGET_BYTES = 32 * 1024 * 1024
"""Later pages of a range read carry about this many bytes (None: fixed pages); a page
that would exceed what the client may receive is asked for again with fewer keys."""
_MAX_PAGE_KEYS = 100_000
_SLICE_KEYS = 2_000  # keys converted between two turns of the event loop
_MAX_RECEIVE_BYTES = 64 * 1024 * 1024
_T = TypeVar("_T")
_log = structlog.get_logger(__name__)

# gRPC's fork handlers run in every fork of this process; while a call is in flight
# they skip their work and leave the child broken, so a fork+exec made then fails
# (~7 % of `subprocess.Popen(..., preexec_fn=...)` with an etcd client busy: PySpark
# starting its JVM in `gcd spark-sweep` did, tests/l0gc/etcd/test_fork.py). No l0gc
# process uses gRPC in a forked child: they are off, unless the operator set the
# variable. Read when gRPC starts (its first channel), which is after this import.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# Codes after which the channel is dropped and the next call connects afresh.
_RECONNECT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)
# Codes after which an idempotent call is tried again (OUT_OF_RANGE: the paged
# revision was compacted, so the read starts over at a new one).
_RETRY_READ = _RECONNECT | {grpc.StatusCode.OUT_OF_RANGE}
# Codes that prove the request was rejected before anything was applied.
_NOT_APPLIED = frozenset({grpc.StatusCode.UNAUTHENTICATED})


@dataclass(slots=True)
class _Session:
    """One open channel to one endpoint, with its stubs and auth metadata."""

    endpoint: str
    channel: grpc.aio.Channel
    kv: Any
    lease: Any
    metadata: tuple[tuple[str, str], ...] | None
    retired: bool = False
    ordered_progress: bool | None = None
    """Whether the endpoint's progress answers are ordered with watch events
    (`l0gc.etcd.watch`); None until the first watch asks."""


def _prefix_end(prefix: bytes) -> bytes:
    """etcd's range_end for "every key starting with prefix"."""
    end = bytearray(prefix)
    for index in reversed(range(len(end))):
        if end[index] < 0xFF:
            end[index] += 1
            return bytes(end[: index + 1])
    return b"\0"  # empty or all-0xff prefix: to the end of the keyspace


def _next_limit(page: Any, first: int, target_bytes: int) -> int:
    """The next page's key count: about `target_bytes` at this page's bytes per key,
    never fewer than the first page's. etcd 3.5 counts the whole rest of the range for
    every page, so the fewer pages a large read takes, the less etcd works."""
    size = sum(len(kv.key) + len(kv.value) for kv in page) / len(page)
    return max(first, min(_MAX_PAGE_KEYS, int(target_bytes / max(size, 1.0))))


def _key_value(raw: Any) -> KeyValue:
    return KeyValue(
        key=raw.key.decode("utf-8", "surrogateescape"),
        value=bytes(raw.value),
        mod_revision=raw.mod_revision,
        create_revision=raw.create_revision,
        lease=raw.lease,
    )


class EtcdKV:
    """The `KV` protocol on etcd; see the module docstring for connection behaviour.

    `endpoints` are "host:port" strings. `timeout_s` bounds every single call (and each
    connection attempt). TLS is on when `tls` is true; `ca_cert` (PEM bytes; system roots
    when None) verifies the server, `cert_chain` + `private_key` authenticate the client.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout_s: float = 5.0,
        username: str | None = None,
        password: str | None = None,
        tls: bool = False,
        ca_cert: bytes | None = None,
        cert_chain: bytes | None = None,
        private_key: bytes | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        page_target_bytes: int | None = PAGE_TARGET_BYTES,
        read_attempts: int = 3,
        retry_backoff_s: float = 0.1,
        max_receive_bytes: int = _MAX_RECEIVE_BYTES,
    ) -> None:
        if not endpoints:
            raise ConfigError("no etcd endpoint given: pass at least one host:port")
        if (username is None) != (password is None):
            raise ConfigError("etcd username and password must be given together")
        if (cert_chain is None) != (private_key is None):
            raise ConfigError("etcd client certificate and key must be given together")
        if page_size < 1 or read_attempts < 1 or timeout_s <= 0:
            raise ConfigError(
                f"page_size ({page_size}), read_attempts ({read_attempts}) and timeout_s "
                f"({timeout_s}) must be positive"
            )
        self._endpoints = tuple(endpoints)
        self._timeout_s = timeout_s
        self._username = username
        self._password = password
        self._credentials = (
            grpc.ssl_channel_credentials(
                root_certificates=ca_cert, private_key=private_key, certificate_chain=cert_chain
            )
            if tls or ca_cert is not None or cert_chain is not None
            else None
        )
        self._page_size = page_size
        self._page_target_bytes = page_target_bytes
        self._max_receive_bytes = max_receive_bytes
        self._read_attempts = read_attempts
        self._retry_backoff_s = retry_backoff_s
        self._session: _Session | None = None
        self._preferred = 0
        self._connect_lock = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"EtcdKV(endpoints={list(self._endpoints)!r}, tls={self._credentials is not None})"

    @property
    def connected_endpoint(self) -> str | None:
        """The endpoint of the open channel, None while disconnected."""
        return None if self._session is None else self._session.endpoint

    # -- connection -------------------------------------------------------------------

    async def _connected(self) -> _Session:
        async with self._connect_lock:
            if self._closed:
                raise EtcdUnavailable(",".join(self._endpoints), "the client was closed")
            if self._session is not None:
                return self._session
            count = len(self._endpoints)
            order = [(self._preferred + step) % count for step in range(count)]
            self._session, self._preferred = await self._open_first(order)
            _log.info("etcd.connected", endpoint=self._session.endpoint)
            return self._session

    async def _open_first(self, order: list[int]) -> tuple[_Session, int]:
        """A session to the first of the endpoints (indexes in `order`) to be ready,
        tried staggered (`l0gc.etcd.stagger`): the next one alongside when one has not
        answered within `CONNECT_STAGGER_S`, at once when one fails. So one that never
        answers (a hung member, a host that drops packets) costs the stagger, not
        `timeout_s`; the others' channels are closed."""
        endpoints, reasons = self._endpoints, []

        def failed(at: int, exc: BaseException) -> None:
            reason = _describe(exc)
            reasons.append(f"{endpoints[order[at]]}: {reason}")
            # info, not warning: EtcdUnavailable below names every endpoint's reason,
            # and a one-shot command prints it as its one error line
            _log.info("etcd.connect_failed", endpoint=endpoints[order[at]], reason=reason)

        won = await first_ready(
            [functools.partial(self._open, endpoints[index]) for index in order],
            stagger_s=CONNECT_STAGGER_S,
            expected=(grpc.RpcError, OSError),
            failed=failed,
            late=self._disconnect,  # `_open` closes its own channel when cancelled
        )
        if won is None:
            raise EtcdUnavailable(",".join(endpoints), "; ".join(reasons))
        return won[0], order[won[1]]

    async def _open(self, endpoint: str) -> _Session:
        options = [
            ("grpc.max_receive_message_length", self._max_receive_bytes),
            # A private subchannel per channel: otherwise a new channel to an endpoint
            # that just restarted inherits the old subchannel's TRANSIENT_FAILURE backoff
            # and `_ready` reports it refused although the server is back.
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if self._credentials is None:
            channel = grpc.aio.insecure_channel(endpoint, options=options)
        else:
            channel = grpc.aio.secure_channel(endpoint, self._credentials, options=options)
        try:
            await asyncio.wait_for(_ready(channel), self._timeout_s)
            metadata = None
            if self._username is not None:
                auth = rpc.AuthStub(channel)
                request = rpc.AuthenticateRequest(name=self._username, password=self._password)
                response = await auth.Authenticate(request, timeout=self._timeout_s)
                metadata = (("token", response.token),)
        except BaseException:
            await channel.close()
            raise
        return _Session(
            endpoint=endpoint,
            channel=channel,
            kv=rpc.KVStub(channel),
            lease=rpc.LeaseStub(channel),
            metadata=metadata,
        )

    async def connect(self) -> str:
        """Connect now instead of on the first call; return the endpoint that answered."""
        return (await self._connected()).endpoint

    def _disconnect(self, session: _Session) -> None:
        """Stop using `session`; close its channel in the background.

        The close has a grace period, so other calls still in flight on the channel end
        with their own result or error instead of being cancelled under their callers.
        """
        if self._session is session:
            self._session = None
        if session.retired:
            return
        session.retired = True
        closing = asyncio.create_task(session.channel.close(grace=self._timeout_s))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close the channel (in-flight calls get a grace period); later calls raise."""
        self._closed = True
        if self._session is not None:
            self._disconnect(self._session)
        await asyncio.gather(*self._closing)

    async def _call(
        self,
        what: str,
        operation: Callable[[_Session], Awaitable[_T]],
        *,
        idempotent: bool,
    ) -> _T:
        """Run `operation` on a connected session; translate and retry as documented."""
        failure: EtcdUnavailable | None = None
        for attempt in range(self._read_attempts):
            if attempt:
                await asyncio.sleep(self._retry_backoff_s * 2 ** (attempt - 1))
            try:
                session = await self._connected()
            except EtcdUnavailable as exc:
                failure = exc  # nothing was sent: safe to retry any call
                continue
            try:
                return await operation(session)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                reason = f"{what}: {code.name} {exc.details()}"
                if code in _RECONNECT:
                    _log.warning("etcd.connection_lost", endpoint=session.endpoint, reason=reason)
                    self._disconnect(session)
                error = EtcdUnavailable(session.endpoint, reason)
                retryable = code in _RETRY_READ if idempotent else code in _NOT_APPLIED
                if not retryable:
                    raise error from exc
                error.__cause__ = exc
                failure = error
        assert failure is not None
        raise failure

    # -- KV protocol --------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        """The key's current value (linearizable read), or None."""

        async def operation(session: _Session) -> KeyValue | None:
            request = rpc.RangeRequest(key=_key_bytes(key))
            response = await session.kv.Range(
                request, timeout=self._timeout_s, metadata=session.metadata
            )
            return _key_value(response.kvs[0]) if response.kvs else None

        return await self._call(f"get {key}", operation, idempotent=True)

    async def range_prefix(self, prefix: str, *, revision: int = 0) -> RangeResult:
        """Every key under `prefix` at one revision, sorted by key, paged internally.

        `revision` 0 reads the current revision; a past one reads etcd's history (the
        deletion journal's checks), which fails with OUT_OF_RANGE once compacted.
        No `sort_order` on the requests: etcd returns a range in ascending key order
        by itself, and sorting would make it fetch the whole remaining range per page.
        """
        items: list[KeyValue] = []
        header = [0, 0]

        def start(at: int, cluster_id: int) -> None:
            items.clear()
            header[:] = [at, cluster_id]

        def take(kvs: Any) -> None:
            items.extend(_key_value(raw) for raw in kvs)

        await self._paged(prefix, revision, start, take)
        return RangeResult(header[0], tuple(items), header[1])

    async def range_fold(self, prefix: str, fold: RangeFold, *, revision: int = 0) -> None:
        """`range_prefix` without holding the result: each page's (key, value) pairs go
        to `fold` as they arrive (`l0gc.contract.kv.FoldReadable`). A read that starts
        again (connection lost, or the first page's revision compacted before the last
        page when `revision` is 0) calls `fold.start` again; an explicit `revision`
        that is compacted fails with EtcdUnavailable."""

        def take(kvs: Any) -> None:
            fold.add((raw.key.decode("utf-8", "surrogateescape"), raw.value) for raw in kvs)

        await self._paged(prefix, revision, fold.start, take)

    async def count(self, prefix: str, *, revision: int) -> int:
        """How many keys are under `prefix` at `revision` (etcd counts them in its index,
        reading no value); EtcdUnavailable when `revision` is compacted."""
        key = prefix.encode()
        request = rpc.RangeRequest(
            key=key, range_end=_prefix_end(key), revision=revision, count_only=True
        )

        async def operation(session: _Session) -> int:
            response = await session.kv.Range(
                request, timeout=self._timeout_s, metadata=session.metadata
            )
            return int(response.count)

        return await self._call(f"count {prefix}", operation, idempotent=True)

    async def changed_keys(self, prefix: str, *, revision: int, after: int) -> dict[str, int]:
        """The keys under `prefix` at `revision` whose mod revision is above `after`, with
        it: one request, keys only (etcd filters by mod revision on its side, so no value
        and no unchanged key is sent; it cannot page such a filter, so this is for a few
        changed keys, not a namespace rewritten: too many for one answer is
        EtcdUnavailable, RESOURCE_EXHAUSTED)."""
        key = prefix.encode()
        request = rpc.RangeRequest(
            key=key,
            range_end=_prefix_end(key),
            revision=revision,
            keys_only=True,
            min_mod_revision=after + 1,
        )

        async def operation(session: _Session) -> dict[str, int]:
            response = await session.kv.Range(
                request, timeout=self._timeout_s, metadata=session.metadata
            )
            return {
                raw.key.decode("utf-8", "surrogateescape"): raw.mod_revision for raw in response.kvs
            }

        return await self._call(f"changed keys {prefix}", operation, idempotent=True)

    async def _paged(
        self,
        prefix: str,
        at_revision: int,
        start: Callable[[int, int], None],
        take: Callable[[Any], None],
    ) -> None:
        """Read `prefix` page by page at one revision (see the module docstring): `start`
        gets the revision and cluster id once the first page is in (again on a retry),
        `take` every page's protobuf key-values in key order."""
        first_key = prefix.encode()
        end = _prefix_end(first_key)

        async def operation(session: _Session) -> None:
            revision = at_revision

            async def page(key: bytes, limit: int) -> Any:
                # A page larger than the client may receive (its keys are much larger than
                # the page before's, which sized it) is asked for again with fewer keys.
                while True:
                    request = rpc.RangeRequest(
                        key=key, range_end=end, limit=limit, revision=revision
                    )
                    try:
                        return await session.kv.Range(
                            request, timeout=self._timeout_s, metadata=session.metadata
                        )
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or limit == 1:
                            raise
                        limit = max(1, limit // 4)

            response = await page(first_key, self._page_size)
            revision = revision or response.header.revision  # later pages: the same revision
            start(revision, response.header.cluster_id)
            while True:
                # The next page is asked for before this one is converted: etcd serves it
                # while this process converts.
                ahead: asyncio.Future[Any] | None = None
                if response.more and response.kvs:
                    limit = self._page_size
                    if self._page_target_bytes is not None:
                        limit = _next_limit(response.kvs, self._page_size, self._page_target_bytes)
                    ahead = asyncio.ensure_future(page(response.kvs[-1].key + b"\0", limit))
                try:
                    # In slices, giving the event loop a turn after each: gRPC sends the
                    # request for the next page and receives it only while the loop runs
                    # (one turn before a whole 32 MiB page was not enough: etcd then
                    # started on the next page only once this one was converted).
                    kvs = response.kvs
                    for begin in range(0, len(kvs), _SLICE_KEYS):
                        await asyncio.sleep(0)
                        take(kvs[begin : begin + _SLICE_KEYS])
                except BaseException:  # e.g. cancelled: no call left behind
                    if ahead is not None:
                        ahead.cancel()
                    raise
                if ahead is None:
                    return
                response = None  # this page's memory goes before the next one is awaited
                response = await ahead

        await self._call(f"range {prefix}", operation, idempotent=True)

    async def watch_prefix(self, prefix: str, start_revision: int) -> EtcdWatch:
        """Watch `prefix` from `start_revision` (see the module docstring)."""
        session = await self._connected()
        start = prefix.encode()
        create = rpc.WatchCreateRequest(
            key=start, range_end=_prefix_end(start), start_revision=start_revision
        )
        if session.ordered_progress is None:
            session.ordered_progress = await self._ordered_progress(session)
        call = rpc.WatchStub(session.channel).Watch(metadata=session.metadata)
        watch = EtcdWatch(
            session.endpoint,
            prefix,
            call,
            self._timeout_s,
            start_revision=start_revision,
            ordered_progress=session.ordered_progress,
        )
        try:
            async with asyncio.timeout(self._timeout_s):
                await call.write(rpc.WatchRequest(create_request=create))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError) as exc:
            await watch.close()
            reason = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else repr(exc)
            raise WatchLost(session.endpoint, f"watch {prefix}: {reason}") from exc
        return watch

    async def _ordered_progress(self, session: _Session) -> bool:
        """Whether `session`'s endpoint orders progress answers with watch events, from
        its version (`l0gc.etcd.watch.progress_is_ordered`); False when it cannot say."""
        try:
            status = await rpc.MaintenanceStub(session.channel).Status(
                rpc.StatusRequest(), timeout=self._timeout_s, metadata=session.metadata
            )
            version = str(status.version)
        except grpc.aio.AioRpcError as exc:
            version = f"unknown ({exc.code().name})"
        ordered = progress_is_ordered(version)
        if not ordered:
            _log.info(
                "etcd.watch_progress_unordered",
                endpoint=session.endpoint,
                version=version,
                effect="a watched view is vouched for up to its last event, not etcd's "
                "answer; etcd 3.5.13 or later makes it current at every read",
            )
        return ordered

    async def txn(self, compares: Sequence[Compare], ops: Sequence[Put | Delete]) -> TxnResult:
        """Apply `ops` iff every mod_revision compare holds. Never retried once sent."""
        request = rpc.TxnRequest(
            compare=[
                rpc.Compare(
                    result=rpc.Compare.EQUAL,
                    target=rpc.Compare.MOD,
                    key=_key_bytes(compare.key),
                    mod_revision=compare.mod_revision,
                )
                for compare in compares
            ],
            success=[_request_op(op) for op in ops],
        )

        async def operation(session: _Session) -> TxnResult:
            try:
                response = await session.kv.Txn(
                    request, timeout=self._timeout_s, metadata=session.metadata
                )
            except grpc.aio.AioRpcError as exc:
                leased = [op.lease for op in ops if isinstance(op, Put) and op.lease]
                if exc.code() == grpc.StatusCode.NOT_FOUND and leased:
                    raise LeaseExpired(leased[0]) from exc
                raise
            return TxnResult(succeeded=response.succeeded, revision=response.header.revision)

        return await self._call("txn", operation, idempotent=False)

    async def lease_grant(self, ttl_s: int) -> int:
        """A new lease id with `ttl_s` seconds to live (etcd may raise a tiny TTL)."""

        async def operation(session: _Session) -> int:
            response = await session.lease.LeaseGrant(
                rpc.LeaseGrantRequest(TTL=ttl_s, ID=0),
                timeout=self._timeout_s,
                metadata=session.metadata,
            )
            return int(response.ID)

        # A grant whose answer was lost leaks a lease that simply expires: not retried
        # so that a caller never holds two live leases.
        return await self._call("lease grant", operation, idempotent=False)

    async def lease_refresh(self, lease_id: int) -> bool:
        """One keepalive round trip; False when etcd no longer knows the lease."""

        async def operation(session: _Session) -> bool:
            call = session.lease.LeaseKeepAlive(timeout=self._timeout_s, metadata=session.metadata)
            try:
                await call.write(rpc.LeaseKeepAliveRequest(ID=lease_id))
                reply = await call.read()
            finally:
                call.cancel()
            if reply is grpc.aio.EOF:
                return False
            return int(reply.TTL) > 0

        return await self._call("lease refresh", operation, idempotent=True)

    async def lease_time_to_live(self, lease_id: int) -> int | None:
        """Seconds the lease has left (etcd's LeaseTimeToLive); None when it is gone."""

        async def operation(session: _Session) -> int | None:
            response = await session.lease.LeaseTimeToLive(
                rpc.LeaseTimeToLiveRequest(ID=lease_id, keys=False),
                timeout=self._timeout_s,
                metadata=session.metadata,
            )
            return None if int(response.TTL) < 0 else int(response.TTL)

        return await self._call("lease time to live", operation, idempotent=True)

    async def lease_revoke(self, lease_id: int) -> None:
        """Revoke the lease (deleting its keys); a lease already gone is not an error."""

        async def operation(session: _Session) -> None:
            try:
                await session.lease.LeaseRevoke(
                    rpc.LeaseRevokeRequest(ID=lease_id),
                    timeout=self._timeout_s,
                    metadata=session.metadata,
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND:
                    raise

        await self._call("lease revoke", operation, idempotent=True)


async def _ready(channel: grpc.aio.Channel) -> None:
    """Wait until the channel is connected; fail at once when the endpoint refuses.

    (`channel_ready()` keeps retrying a refused endpoint until the timeout, which would
    make failing over to the next endpoint as slow as the timeout.)
    """
    state = channel.get_state(try_to_connect=True)
    while state != grpc.ChannelConnectivity.READY:
        if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            raise ConnectionRefusedError(
                "cannot connect (refused, unreachable or TLS handshake failed)"
            )
        if state == grpc.ChannelConnectivity.SHUTDOWN:
            raise ConnectionAbortedError("channel shut down")
        await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=True)


def _key_bytes(key: str) -> bytes:
    """A key's bytes: the inverse of how keys are read (UTF-8, surrogateescape), so a
    key holding bytes that are not UTF-8 can be read, compared and deleted again."""
    return key.encode("utf-8", "surrogateescape")


def _request_op(op: Put | Delete) -> Any:
    if isinstance(op, Put):
        return rpc.RequestOp(
            request_put=rpc.PutRequest(key=_key_bytes(op.key), value=op.value, lease=op.lease)
        )
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=_key_bytes(op.key)))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name} {exc.details()}"
    if isinstance(exc, TimeoutError):
        return "no connection within the timeout"
    if isinstance(exc, OSError):
        return str(exc)
    return repr(exc)
