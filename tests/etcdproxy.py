"""A loopback TCP proxy in front of etcd that counts the connections a command opens."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType


class CountingProxy:
    """A loopback TCP proxy in front of `upstream` (host:port), on a thread of its own,
    that counts the connections it accepts (`accepted`) and pipes their bytes through."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.endpoint = ""

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop
        )
        self._server = started.result(timeout=10)
        self.endpoint = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:  # ends the pipes still open (etcd's side, say)
            writer.close()
        await asyncio.wait_for(asyncio.gather(*self._tasks), timeout=10)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
            self._writers.append(up_writer)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except OSError:
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        with contextlib.suppress(OSError):
            sink.close()
