"""GET /v1/explain on the daemon's port, and `gcd.explain` for programs."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

import gcd
from gcd.explainer.http import MAX_KEYS, ExplainRoute
from gcd.rules.layout import KeyLayout
from l0gc.auth import TokenFile
from l0lab.testing.local_servers import LocalS3
from l0lab.testing.memory import MemoryObjectStore

LAYOUT = KeyLayout.default("l0/data")
TOKEN = "0123456789abcdef0123456789abcdef"


def route(
    store: MemoryObjectStore, host: str = "127.0.0.1", tokens: TokenFile | None = None
) -> ExplainRoute:
    """The route for `store` with M given by hand (no etcd)."""
    return ExplainRoute(store, None, LAYOUT, 600.0, 5, None, None, host, tokens)


async def get(
    explain: ExplainRoute, query: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, object]]:
    """One GET of /v1/explain?query on an app with the route."""
    app = web.Application()
    for path, handler in explain.routes():
        app.router.add_get(path, handler)
    async with TestClient(TestServer(app)) as client:
        answer = await client.get(f"/v1/explain?{query}", headers=headers or {})
        return answer.status, await answer.json()


def test_explain_route_answers_as_the_command_does() -> None:
    """Two keys: one deletable, one kept above M; the JSON is explain's."""
    store = MemoryObjectStore()
    old = time.time() - 3600
    store.put(LAYOUT.format(7, 3, "a"), last_modified_s=old)
    store.put(LAYOUT.format(7, 9, "b"), last_modified_s=old)
    query = f"key={LAYOUT.format(7, 3, 'a')}&key={LAYOUT.format(7, 9, 'b')}"
    status, doc = asyncio.run(get(route(store), query))
    assert status == 200
    assert [k["verdict"] for k in doc["keys"]] == ["deletable", "kept"]  # type: ignore[index,union-attr]
    assert doc["safe_epoch"] == 5


def test_explain_route_is_role_checked_beyond_loopback(tmp_path: Path) -> None:
    """Beyond loopback without tokens: 403; with a token file: 401 without a token, 200
    with one of any role."""
    store = MemoryObjectStore()
    key = LAYOUT.format(7, 3, "a")
    assert asyncio.run(get(route(store, host="0.0.0.0"), f"key={key}"))[0] == 403
    path = tmp_path / "tokens"
    path.write_text(f"reconciler:{TOKEN}\n")
    os.chmod(path, 0o600)
    guarded = route(store, host="0.0.0.0", tokens=TokenFile(str(path)))
    assert asyncio.run(get(guarded, f"key={key}"))[0] == 401
    bad = {"Authorization": "Bearer " + "x" * 32}
    assert asyncio.run(get(guarded, f"key={key}", bad))[0] == 401
    status, doc = asyncio.run(get(guarded, f"key={key}", {"Authorization": f"Bearer {TOKEN}"}))
    assert (status, doc["keys"][0]["verdict"]) == (200, "absent")  # type: ignore[index]


def test_explain_route_refuses_no_key_and_too_many() -> None:
    """No key, an empty key or more than MAX_KEYS: 400 saying the limit."""
    explain = route(MemoryObjectStore())
    assert asyncio.run(get(explain, ""))[0] == 400
    assert asyncio.run(get(explain, "key="))[0] == 400
    many = "&".join(f"key={i}" for i in range(MAX_KEYS + 1))
    status, doc = asyncio.run(get(explain, many))
    assert status == 400
    assert str(MAX_KEYS) in str(doc["message"])


@pytest.mark.integration
def test_the_python_api_gives_the_json_answer(s3_server: LocalS3, bucket: str) -> None:
    """`gcd.explain(keys, **flags)`: one dict per key, as `gcd explain --json`."""
    key = LAYOUT.format(7, 3, "a")
    s3_server.seed(bucket, [key])
    answers = asyncio.run(
        gcd.explain(
            [key, "elsewhere"],
            bucket=bucket,
            root="l0/data",
            endpoint_url=s3_server.endpoint_url,
            safe_epoch=2,
            region="us-east-1",
        )
    )
    assert [(a["key"], a["verdict"]) for a in answers] == [(key, "kept"), ("elsewhere", "never")]
    with pytest.raises(gcd.explain.__globals__["ConfigError"]):
        asyncio.run(gcd.explain([key], bucket=bucket, no_such_flag=1))
