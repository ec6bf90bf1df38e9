"""Fixtures shared by the S3 store's tests: a scripted endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from l0lab.testing.local_servers import free_port

_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[list[bytes]], Awaitable[tuple[str, list[bytes]]]]]:
    """`start(answers)`: an endpoint answering every listing with an empty page and each
    DeleteObjects with the next of `answers`; its URL and the delete bodies received."""
    runners: list[web.AppRunner] = []

    async def start(answers: list[bytes]) -> tuple[str, list[bytes]]:
        bodies: list[bytes] = []

        async def listing(request: web.Request) -> web.Response:
            page = f'<ListBucketResult xmlns="{_NS}"><IsTruncated>false</IsTruncated>'
            return web.Response(body=f"{page}</ListBucketResult>".encode())

        async def delete(request: web.Request) -> web.Response:
            bodies.append(await request.read())
            return web.Response(body=answers[len(bodies) - 1], content_type="application/xml")

        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", listing)
        app.router.add_route("POST", "/{tail:.*}", delete)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{port}", bodies

    yield start
    for runner in runners:
        await runner.cleanup()
