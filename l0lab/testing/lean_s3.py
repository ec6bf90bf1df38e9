"""A lean S3 server in memory, for benchmarks where the client must be the bound.

    python -m l0lab.testing.lean_s3 --port PORT [--tls-cert PEM --tls-key PEM]
                                                      (127.0.0.1 only; https with a cert)

Why it exists: `rclone serve s3 :memory:` is cheap but lists wrongly while keys are
deleted, which is what every bulk deleter does (`l0lab.testing.local_rclone`): a
ListObjectsV2 whose StartAfter or continuation names a key deleted meanwhile starts again
from the top of the prefix, and one whose walk meets a directory just emptied answers
an empty page marked complete. Every side of `bench.paired` then left keys behind.
moto and SeaweedFS list correctly but cost 0.3-1 ms of server CPU per key.

This one keeps each bucket as a sorted list of keys and a dict of objects, and answers
the few S3 calls the benchmark sides make (gcd sweep, obstore, s5cmd), path-style, with
any credentials (no signature is checked): ListBuckets, CreateBucket, HeadBucket,
ListObjectsV2 and ListObjects (prefix, delimiter, StartAfter, marker, continuation
token, encoding-type=url, max-keys up to 1,000; keys in byte order), DeleteObjects
(quiet or not), PutObject (If-None-Match: *), GetObject, HeadObject, DeleteObject,
GetBucketVersioning (never enabled), GetObjectLockConfiguration (none) and
GetBucketLocation. Anything else answers 501 NotImplemented. A deleted key leaves the
sorted list lazily (compacted once they are half of it), so a delete costs a dict pop.

Keys are loaded in bulk by a control call that is not S3, ``POST /_lean/load?bucket=B
&mtime=EPOCH_SECONDS`` with the keys one a line (each a 1-byte object "x"), which
replaces the bucket's contents; ``GET /_lean/count?bucket=B`` answers the number of
objects. `LeanS3` runs it as a child process, stopped by PID.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import contextlib
import hashlib
import html
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["LeanS3", "serve"]

_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_XML = "application/xml"
_KEY = re.compile(rb"<Key>(.*?)</Key>", re.DOTALL)
_QUIET = re.compile(rb"<Quiet>\s*true\s*</Quiet>", re.IGNORECASE)
_START_TIMEOUT_S = 30.0
_STOP_GRACE_S = 2.0
_CONTROL_TIMEOUT_S = 600.0


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _iso(mtime: float) -> str:
    return datetime.fromtimestamp(mtime, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass(slots=True)
class _Object:
    body: bytes
    etag: str
    mtime: float


@dataclass(slots=True)
class _Bucket:
    keys: list[str] = field(default_factory=list)
    """Sorted; may still hold deleted keys (not in `objects`) until `compact`."""
    objects: dict[str, _Object] = field(default_factory=dict)
    dead: int = 0

    def put(self, key: str, obj: _Object) -> None:
        if key not in self.objects:
            at = bisect.bisect_left(self.keys, key)
            if at < len(self.keys) and self.keys[at] == key:
                self.dead -= 1  # deleted before, still listed lazily
            else:
                self.keys.insert(at, key)
        self.objects[key] = obj

    def delete(self, key: str) -> None:
        if self.objects.pop(key, None) is not None:
            self.dead += 1
            if self.dead > 10_000 and self.dead * 2 > len(self.keys):
                self.keys = [k for k in self.keys if k in self.objects]
                self.dead = 0


def _error(status: int, code: str, message: str = "") -> Any:
    from aiohttp import web  # noqa: PLC0415 - the server process only

    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{_escape(message or code)}</Message></Error>"
    )
    return web.Response(status=status, text=body, content_type=_XML)


def _aws_chunked(body: bytes) -> bytes:
    """The payload of an aws-chunked body (``hex-size[;ext]\\r\\ndata\\r\\n ... 0\\r\\n``)."""
    out = bytearray()
    at = 0
    while True:
        end = body.index(b"\r\n", at)
        size = int(body[at:end].split(b";", 1)[0], 16)
        if size == 0:
            return bytes(out)
        out += body[end + 2 : end + 2 + size]
        at = end + 2 + size + 2


class _Server:
    def __init__(self) -> None:
        self.buckets: dict[str, _Bucket] = {}

    # -- routing ---------------------------------------------------------------------

    async def handle(self, request: Any) -> Any:
        path = request.path
        if path.startswith("/_lean/"):
            return await self.control(request, path[len("/_lean/") :])
        bucket_name, _, key = path.lstrip("/").partition("/")
        method = request.method
        query = request.query
        if not bucket_name:
            return self.list_buckets() if method == "GET" else _error(501, "NotImplemented")
        bucket = self.buckets.get(bucket_name)
        if not key:
            if method == "PUT" and not query:
                self.buckets.setdefault(bucket_name, _Bucket())
                return self.ok()
            if bucket is None:
                return _error(404, "NoSuchBucket", bucket_name)
            if method == "HEAD":
                return self.ok()
            if method == "POST" and "delete" in query:
                return self.delete_objects(bucket, await request.read())
            if method == "GET":
                if "versioning" in query:
                    return self.xml(f'<VersioningConfiguration xmlns="{_NS}"/>')
                if "object-lock" in query:
                    return _error(404, "ObjectLockConfigurationNotFoundError")
                if "location" in query:
                    return self.xml(f'<LocationConstraint xmlns="{_NS}"/>')
                if not (set(query) - {"list-type", "prefix", "delimiter", "max-keys"} - _LIST):
                    return self.list_objects(bucket_name, bucket, query)
            return _error(501, "NotImplemented", f"{method} {request.path_qs}")
        if bucket is None:
            return _error(404, "NoSuchBucket", bucket_name)
        if query and not set(query) <= {"x-id"}:
            return _error(501, "NotImplemented", f"{method} {request.path_qs}")
        if method == "PUT":
            return await self.put_object(bucket, key, request)
        if method in ("GET", "HEAD"):
            return self.get_object(bucket, key, head=method == "HEAD")
        if method == "DELETE":
            bucket.delete(key)
            from aiohttp import web  # noqa: PLC0415

            return web.Response(status=204)
        return _error(501, "NotImplemented", f"{method} {request.path_qs}")

    def ok(self) -> Any:
        from aiohttp import web  # noqa: PLC0415

        return web.Response(status=200)

    def xml(self, body: str) -> Any:
        from aiohttp import web  # noqa: PLC0415

        return web.Response(
            body=('<?xml version="1.0" encoding="UTF-8"?>\n' + body).encode(),
            content_type=_XML,
        )

    # -- the S3 calls ----------------------------------------------------------------

    def list_buckets(self) -> Any:
        now = _iso(time.time())
        names = "".join(
            f"<Bucket><Name>{_escape(name)}</Name><CreationDate>{now}</CreationDate></Bucket>"
            for name in sorted(self.buckets)
        )
        return self.xml(
            f'<ListAllMyBucketsResult xmlns="{_NS}"><Owner><ID>lean</ID></Owner>'
            f"<Buckets>{names}</Buckets></ListAllMyBucketsResult>"
        )

    def list_objects(self, name: str, bucket: _Bucket, query: Any) -> Any:
        v2 = query.get("list-type") == "2"
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter", "")
        encode = query.get("encoding-type") == "url"
        try:
            max_keys = min(int(query.get("max-keys", "1000")), 1000)
        except ValueError:
            return _error(400, "InvalidArgument", "max-keys")
        if v2:
            token = query.get("continuation-token")
            start = query.get("start-after", "")
            if token:
                try:
                    start = max(start, base64.urlsafe_b64decode(token.encode()).decode())
                except ValueError:
                    return _error(400, "InvalidArgument", "The continuation token is not valid")
        else:
            start = query.get("marker", "")
        keys, objects = bucket.keys, bucket.objects
        at = max(bisect.bisect_left(keys, prefix), bisect.bisect_right(keys, start))
        contents: list[str] = []
        prefixes: list[str] = []
        last = ""
        truncated = False
        while at < len(keys):
            key = keys[at]
            if not key.startswith(prefix):
                break
            obj = objects.get(key)
            if obj is None:
                at += 1
                continue
            if len(contents) + len(prefixes) >= max_keys:
                truncated = True
                break
            if delimiter:
                cut = key.find(delimiter, len(prefix))
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    prefixes.append(common)
                    last = common
                    # past every key under `common`
                    at = bisect.bisect_left(keys, common[:-1] + chr(ord(common[-1]) + 1))
                    continue
            shown = quote(key, safe="-_.~/") if encode else _escape(key)
            contents.append(
                f"<Contents><Key>{shown}</Key><LastModified>{_iso(obj.mtime)}</LastModified>"
                f"<ETag>&quot;{obj.etag}&quot;</ETag><Size>{len(obj.body)}</Size>"
                "<StorageClass>STANDARD</StorageClass></Contents>"
            )
            last = key
            at += 1

        def show(text: str) -> str:
            return quote(text, safe="-_.~/") if encode else _escape(text)

        parts = [
            f'<ListBucketResult xmlns="{_NS}"><Name>{_escape(name)}</Name>',
            f"<Prefix>{show(prefix)}</Prefix>",
            f"<MaxKeys>{max_keys}</MaxKeys>",
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>",
        ]
        if delimiter:
            parts.append(f"<Delimiter>{show(delimiter)}</Delimiter>")
        if encode:
            parts.append("<EncodingType>url</EncodingType>")
        if v2:
            parts.append(f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount>")
            if query.get("continuation-token"):
                parts.append(
                    f"<ContinuationToken>{_escape(query['continuation-token'])}</ContinuationToken>"
                )
            if query.get("start-after"):
                parts.append(f"<StartAfter>{show(query['start-after'])}</StartAfter>")
            if truncated:
                token = base64.urlsafe_b64encode(last.encode()).decode()
                parts.append(f"<NextContinuationToken>{token}</NextContinuationToken>")
        else:
            parts.append(f"<Marker>{show(query.get('marker', ''))}</Marker>")
            if truncated and delimiter:
                parts.append(f"<NextMarker>{show(last)}</NextMarker>")
        parts += contents
        parts += [f"<CommonPrefixes><Prefix>{show(p)}</Prefix></CommonPrefixes>" for p in prefixes]
        parts.append("</ListBucketResult>")
        return self.xml("".join(parts))

    def delete_objects(self, bucket: _Bucket, body: bytes) -> Any:
        quiet = _QUIET.search(body) is not None
        deleted: list[str] = []
        for raw in _KEY.findall(body):
            key = raw.decode()
            if "&" in key:
                key = html.unescape(key)
            bucket.delete(key)
            if not quiet:
                deleted.append(f"<Deleted><Key>{_escape(key)}</Key></Deleted>")
        return self.xml(f'<DeleteResult xmlns="{_NS}">{"".join(deleted)}</DeleteResult>')

    async def put_object(self, bucket: _Bucket, key: str, request: Any) -> Any:
        from aiohttp import web  # noqa: PLC0415

        body = await request.read()
        encoding = request.headers.get("Content-Encoding", "")
        sha = request.headers.get("x-amz-content-sha256", "")
        if "aws-chunked" in encoding or sha.startswith("STREAMING-"):
            body = _aws_chunked(body)
        if request.headers.get("If-None-Match") == "*" and key in bucket.objects:
            return _error(412, "PreconditionFailed", "At least one of the preconditions failed")
        etag = hashlib.md5(body, usedforsecurity=False).hexdigest()
        bucket.put(key, _Object(body, etag, time.time()))
        return web.Response(status=200, headers={"ETag": f'"{etag}"'})

    def get_object(self, bucket: _Bucket, key: str, *, head: bool) -> Any:
        from aiohttp import web  # noqa: PLC0415

        obj = bucket.objects.get(key)
        if obj is None:
            if head:
                return web.Response(status=404)
            return _error(404, "NoSuchKey", key)
        headers = {
            "ETag": f'"{obj.etag}"',
            "Last-Modified": formatdate(obj.mtime, usegmt=True),
            "Content-Type": "application/octet-stream",
        }
        if head:
            headers["Content-Length"] = str(len(obj.body))
            return web.Response(status=200, headers=headers)
        return web.Response(status=200, body=obj.body, headers=headers)

    # -- control (not S3) --------------------------------------------------------------

    async def control(self, request: Any, command: str) -> Any:
        from aiohttp import web  # noqa: PLC0415

        name = request.query.get("bucket", "")
        if command == "load" and request.method == "POST":
            mtime = float(request.query.get("mtime", time.time()))
            keys = sorted({k for k in (await request.read()).decode().split("\n") if k})
            body = b"x"
            etag = hashlib.md5(body, usedforsecurity=False).hexdigest()
            obj = _Object(body, etag, mtime)
            self.buckets[name] = _Bucket(keys, dict.fromkeys(keys, obj))
            return web.json_response({"loaded": len(keys)})
        if command == "count":
            bucket = self.buckets.get(name)
            return web.json_response({"objects": 0 if bucket is None else len(bucket.objects)})
        return web.json_response({"error": command}, status=404)


_LIST = frozenset({"encoding-type", "start-after", "continuation-token", "marker", "fetch-owner"})


def serve(port: int, tls: tuple[str, str] | None = None) -> None:
    """Serve on 127.0.0.1:`port` until killed; https with `tls` (certificate, key)."""
    import ssl  # noqa: PLC0415

    from aiohttp import web  # noqa: PLC0415

    context = None
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
    server = _Server()
    app = web.Application(client_max_size=1 << 30)
    app.router.add_route("*", "/{tail:.*}", server.handle)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, ssl_context=context)


@dataclass
class LeanS3:
    """`python -m l0lab.testing.lean_s3` on a free loopback port, stopped by PID."""

    region: str = "us-east-1"
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    tls: tuple[Path, Path, Path] | None = None
    """https: (certificate, key, the CA that signed it), e.g. from `l0lab.testing.pki`."""
    _client: Any = field(default=None, repr=False)
    _tls_client: Any = field(default=None, repr=False)  # trusts tls[2]; made once

    @property
    def endpoint_url(self) -> str:
        """http://127.0.0.1:PORT (https:// with `tls`)."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _open(self, request: str | urllib.request.Request, timeout: float) -> Any:
        if self.tls is not None and self._tls_client is None:
            import ssl  # noqa: PLC0415

            self._tls_client = ssl.create_default_context(cafile=str(self.tls[2]))
        return urllib.request.urlopen(request, timeout=timeout, context=self._tls_client)  # noqa: S310

    @property
    def pid(self) -> int | None:
        """The server process, while running."""
        return None if self.process is None else self.process.pid

    def start(self) -> LeanS3:
        """Start the server and wait until it answers."""
        from l0lab.testing.local_servers import free_port  # noqa: PLC0415

        self.port = free_port()
        tls = (
            []
            if self.tls is None
            else ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
        )
        self.process = subprocess.Popen(  # noqa: S603 - this module, this interpreter
            [sys.executable, "-m", "l0lab.testing.lean_s3", "--port", str(self.port), *tls],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise RuntimeError("the lean S3 server exited at start")
            try:
                with self._open(self.endpoint_url + "/", 2) as answer:
                    answer.read()
            except (OSError, urllib.error.URLError):
                time.sleep(0.05)
                continue
            return self
        self.stop()
        raise RuntimeError(f"the lean S3 server did not answer on {self.endpoint_url}")

    def _control(self, command: str, body: bytes | None = None, **query: str) -> Any:
        import json  # noqa: PLC0415

        args = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
        request = urllib.request.Request(  # noqa: S310 - our own loopback server
            f"{self.endpoint_url}/_lean/{command}?{args}",
            data=body,
            method="POST" if body is not None else "GET",
        )
        with self._open(request, _CONTROL_TIMEOUT_S) as answer:
            return json.loads(answer.read())

    def load(self, bucket: str, keys: list[str], last_modified: datetime | None = None) -> None:
        """Make `bucket` hold exactly `keys` (1-byte objects, LastModified
        `last_modified`, else now), in one control call."""
        stamp = (last_modified or datetime.now(UTC)).timestamp()
        self._control("load", "\n".join(keys).encode(), bucket=bucket, mtime=repr(stamp))

    def count(self, bucket: str) -> int:
        """How many objects `bucket` holds."""
        return int(self._control("count", bucket=bucket)["objects"])

    def create_bucket(self, bucket: str) -> None:
        """Create a bucket (no-op when it exists)."""
        self.client().create_bucket(Bucket=bucket)

    def delete_bucket_contents(self, bucket: str) -> None:
        """Remove every object (the bucket stays)."""
        self.load(bucket, [])

    def keys(self, bucket: str) -> set[str]:
        """Every key in the bucket, listed over S3."""
        found: set[str] = set()
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket):
            found.update(item["Key"] for item in page.get("Contents", []))
        return found

    def cpu_seconds(self) -> float:
        """User + system CPU the server has used (from /proc/PID/stat)."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def client(self) -> Any:
        """A boto3 S3 client for the server (path-style, any credentials)."""
        if self._client is None:
            import boto3  # noqa: PLC0415
            from botocore.config import Config  # noqa: PLC0415

            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",  # noqa: S106
                config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
                verify=None if self.tls is None else str(self.tls[2]),
            )
        return self._client

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL after a short grace."""
        from l0lab.testing.local_servers import stop_process  # noqa: PLC0415

        if self.process is not None:
            proc, self.process = self.process, None
            with contextlib.suppress(ProcessLookupError):
                stop_process(proc, _STOP_GRACE_S)
        self._client = None

    def __enter__(self) -> LeanS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> int:
    """Serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert", help="serve https with this certificate (PEM)")
    parser.add_argument("--tls-key", help="and this key (PEM)")
    args = parser.parse_args()
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    serve(args.port, None if args.tls_cert is None else (args.tls_cert, args.tls_key))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
