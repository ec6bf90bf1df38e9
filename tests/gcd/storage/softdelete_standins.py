"""Stand-ins for the soft delete APIs Azurite and the GCS emulator do not implement.

Small aiohttp servers on a free loopback port, in a thread of their own (so that a
synchronous `gcd` command can talk to them too), answering only the calls l0gc makes,
as the service documents them (the documents are cited in
tests/gcd/storage/test_soft_delete.py). State is a dict of live objects and one of
soft-deleted ones; each server records the requests it was sent (`calls`).
"""

from __future__ import annotations

import asyncio
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

__all__ = ["AzureStandIn", "GcsStandIn", "Stored"]


@dataclass
class Stored:
    """One object: its bytes, its generation (GCS) and when it was written."""

    body: bytes
    generation: int
    updated: float


@dataclass
class _Server:
    """An aiohttp app served from its own thread and loop."""

    live: dict[str, Stored] = field(default_factory=dict)
    deleted: dict[tuple[str, int], Stored] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None
    _generations: int = 1000

    def app(self) -> web.Application:
        """The routes (subclasses)."""
        raise NotImplementedError

    def put(self, key: str, body: bytes, updated: float) -> Stored:
        """Write a live object with a new generation."""
        self._generations += 1
        stored = self.live[key] = Stored(body, self._generations, updated)
        return stored

    def delete(self, key: str) -> bool:
        """Soft-delete a live object (False when there is none)."""
        stored = self.live.pop(key, None)
        if stored is None:
            return False
        self.deleted[(key, stored.generation)] = stored
        return True

    def start(self) -> None:
        """Serve on 127.0.0.1, a free port, until `stop`."""
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def serve() -> None:
            self._runner = web.AppRunner(self.app())
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()

        def run() -> None:
            assert self._loop is not None
            self._loop.run_until_complete(serve())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(10), "the stand-in server did not start"

    def stop(self) -> None:
        """Stop serving and end the thread."""
        assert self._loop is not None
        assert self._runner is not None
        assert self._thread is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@dataclass
class GcsStandIn(_Server):
    """The JSON API calls of `gcd.storage.gcs.client` with a bucket soft delete policy."""

    bucket: str = "standin"
    retention_s: int | None = 604800
    """softDeletePolicy.retentionDurationSeconds; None: no policy; -1: buckets.get 403."""

    @property
    def endpoint_url(self) -> str:
        """http://127.0.0.1:PORT."""
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        """buckets.get, objects.list/get/insert/restore, batch delete."""
        app = web.Application()
        app.router.add_get("/storage/v1/b/{bucket}", self.bucket_get)
        app.router.add_get("/storage/v1/b/{bucket}/o", self.objects_list)
        app.router.add_get("/storage/v1/b/{bucket}/o/{name}", self.objects_get)
        app.router.add_post("/storage/v1/b/{bucket}/o/{name}/restore", self.objects_restore)
        app.router.add_post("/upload/storage/v1/b/{bucket}/o", self.objects_insert)
        app.router.add_post("/batch/storage/v1", self.batch)
        return app

    def _resource(self, key: str, stored: Stored) -> dict[str, Any]:
        return {
            "kind": "storage#object",
            "bucket": self.bucket,
            "name": key,
            "generation": str(stored.generation),
            "size": str(len(stored.body)),
            "updated": datetime.fromtimestamp(stored.updated, UTC).isoformat(),
        }

    async def bucket_get(self, request: web.Request) -> web.Response:
        self.calls.append(f"buckets.get {request.query_string}")
        if self.retention_s == -1:
            return web.json_response({"error": {"code": 403, "message": "denied"}}, status=403)
        doc: dict[str, Any] = {"kind": "storage#bucket", "name": self.bucket}
        if self.retention_s is not None:
            doc["softDeletePolicy"] = {
                "retentionDurationSeconds": str(self.retention_s),
                "effectiveTime": "2026-01-01T00:00:00Z",
            }
        fields = request.query.get("fields")
        if fields == "softDeletePolicy":
            doc = {k: v for k, v in doc.items() if k == "softDeletePolicy"}
        return web.json_response(doc)

    async def objects_list(self, request: web.Request) -> web.Response:
        self.calls.append("objects.list")
        prefix = request.query.get("prefix", "")
        start = request.query.get("startOffset", "")
        items = [
            self._resource(k, s)
            for k, s in sorted(self.live.items())
            if k.startswith(prefix) and k >= start
        ]
        return web.json_response({"kind": "storage#objects", "items": items})

    async def objects_get(self, request: web.Request) -> web.Response:
        key = request.match_info["name"]
        stored = self.live.get(key)
        if stored is None:
            return web.json_response(
                {"error": {"code": 404, "message": "No such object"}}, status=404
            )
        if request.query.get("alt") == "media":
            return web.Response(body=stored.body)
        return web.json_response(self._resource(key, stored))

    async def objects_insert(self, request: web.Request) -> web.Response:
        key = request.query["name"]
        if request.query.get("ifGenerationMatch") == "0" and key in self.live:
            return web.json_response({"error": {"code": 412, "message": "exists"}}, status=412)
        stored = self.put(key, await request.read(), datetime.now(UTC).timestamp())
        return web.json_response(self._resource(key, stored))

    async def objects_restore(self, request: web.Request) -> web.Response:
        """objects.restore: the soft-deleted `generation` becomes live again (with a new
        generation, as GCS does); ifGenerationMatch=0 fails 412 while one is live."""
        key = request.match_info["name"]
        self.calls.append(f"objects.restore {key} {request.query_string}")
        generation = int(request.query["generation"])
        if request.query.get("ifGenerationMatch") == "0" and key in self.live:
            return web.json_response({"error": {"code": 412, "message": "live"}}, status=412)
        stored = self.deleted.pop((key, generation), None)
        if stored is None:
            return web.json_response(
                {"error": {"code": 404, "message": "No such object"}}, status=404
            )
        restored = self.put(key, stored.body, datetime.now(UTC).timestamp())
        return web.json_response(self._resource(key, restored))

    async def batch(self, request: web.Request) -> web.Response:
        """A JSON batch of objects.delete calls: each answered 204 (404 when missing)."""
        body = (await request.read()).decode()
        boundary = "standin_answer"
        parts = []
        for content_id, path in re.findall(r"Content-ID: <([^>]+)>\r\n\r\nDELETE (\S+) HTTP", body):
            key = urllib.parse.unquote(path.rsplit("/o/", 1)[1])
            self.calls.append(f"objects.delete {key}")
            status = "204 No Content" if self.delete(key) else "404 Not Found"
            parts.append(
                f"--{boundary}\r\nContent-Type: application/http\r\nContent-ID: "
                f"<response-{content_id}>\r\n\r\nHTTP/1.1 {status}\r\n\r\n"
            )
        text = "".join(parts) + f"--{boundary}--\r\n"
        return web.Response(
            body=text.encode(), content_type=f"multipart/mixed; boundary={boundary}"
        )


_SERVICE_PROPERTIES = (
    '<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties>'
    "<DeleteRetentionPolicy><Enabled>{enabled}</Enabled>{days}</DeleteRetentionPolicy>"
    "</StorageServiceProperties>"
)


@dataclass
class AzureStandIn(_Server):
    """The Blob service calls of `AzureBlobStore.soft_delete_retention` and `undelete`,
    path-style (`/{account}/{container}/{blob}`) as for Azurite."""

    account: str = "devstoreaccount1"
    retention_days: int | None = 7
    """DeleteRetentionPolicy Days; None: the policy is disabled."""

    @property
    def account_url(self) -> str:
        """The blob endpoint, path-style."""
        return f"http://127.0.0.1:{self.port}/{self.account}"

    def app(self) -> web.Application:
        """Get Blob Service Properties, Get Blob Properties (HEAD), Undelete Blob."""
        app = web.Application()
        app.router.add_get("/{account}/", self.service_properties)
        app.router.add_get("/{account}", self.service_properties)
        app.router.add_route("HEAD", "/{account}/{container}/{blob:.+}", self.blob_properties)
        app.router.add_put("/{account}/{container}/{blob:.+}", self.undelete)
        return app

    def _blob(self, request: web.Request) -> str:
        return f"{request.match_info['container']}/{request.match_info['blob']}"

    async def service_properties(self, request: web.Request) -> web.Response:
        self.calls.append(f"get-service-properties {request.query_string}")
        if (request.query.get("restype"), request.query.get("comp")) != ("service", "properties"):
            return web.Response(status=400)
        enabled = self.retention_days is not None
        days = f"<Days>{self.retention_days}</Days>" if enabled else ""
        text = _SERVICE_PROPERTIES.format(enabled=str(enabled).lower(), days=days)
        version = request.headers.get("x-ms-version", "")
        return web.Response(
            text=text, content_type="application/xml", headers={"x-ms-version": version}
        )

    async def blob_properties(self, request: web.Request) -> web.Response:
        stored = self.live.get(self._blob(request))
        if stored is None:
            return web.Response(status=404, headers={"x-ms-error-code": "BlobNotFound"})
        return web.Response(
            status=200,
            headers={
                "Content-Length": str(len(stored.body)),
                "x-ms-blob-type": "BlockBlob",
                "ETag": f'"0x{stored.generation:X}"',
                "Last-Modified": datetime.fromtimestamp(stored.updated, UTC).strftime(
                    "%a, %d %b %Y %H:%M:%S GMT"
                ),
            },
        )

    async def undelete(self, request: web.Request) -> web.Response:
        """Undelete Blob (``PUT ...?comp=undelete``): the soft-deleted blob is live again;
        404 BlobNotFound when there is none."""
        key = self._blob(request)
        self.calls.append(f"undelete {key} {request.query_string}")
        if request.query.get("comp") != "undelete":
            return web.Response(status=400)
        found = [pair for pair in self.deleted if pair[0] == key]
        if not found:
            if key in self.live:
                return web.Response(status=200)  # a live blob, nothing soft-deleted: a no-op
            return web.Response(status=404, headers={"x-ms-error-code": "BlobNotFound"})
        for pair in found:
            self.live[key] = self.deleted.pop(pair)
        return web.Response(status=200)
