"""A loopback TCP forwarder that a test can cut, to make a real outage of a server (the
database, Redis) without stopping it.

- `cut()` closes the listening socket (new connections are refused) and resets every open
  connection, as a crashed host would; `restore()` listens on the same port again.
- `blackhole()` is a partition: connections stay open and new ones are accepted, but no byte
  moves in either direction; `heal()` lets the held bytes through, late, as TCP would deliver
  them once a partition ends (a request sent during the partition then runs after its client
  gave up on it).
- `drop_silently()` is a NAT that forgot the connections open now: their bytes vanish (no
  reset, no FIN), while new connections work."""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio


class Forwarder:
    def __init__(self, nursery: trio.Nursery, target: tuple[str, int]) -> None:
        self._nursery = nursery
        self._target = target
        self._streams: set[trio.SocketStream] = set()
        self._listener: trio.SocketListener | None = None
        self._serving: trio.CancelScope | None = None
        self.port = 0
        self.connections = 0
        self._flowing = trio.Event()
        self._flowing.set()
        self._dropped: set[trio.SocketStream] = set()

    async def listen(self) -> None:
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
        await sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        self._listener = trio.SocketListener(sock)
        self._serving = await self._nursery.start(self._accept, self._listener)

    async def _accept(
        self, listener: trio.SocketListener, task_status: trio.TaskStatus[trio.CancelScope]
    ) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            while True:
                try:
                    client = await listener.accept()
                except trio.ClosedResourceError:  # cut
                    return
                self._nursery.start_soon(self._pipe_pair, client)

    def drop_silently(self) -> None:
        """The connections open now stop moving bytes for good, with nothing sent to either
        side; connections opened later are not affected."""
        self._dropped |= self._streams

    async def _pipe_pair(self, client: trio.SocketStream) -> None:
        self.connections += 1
        try:
            await self._flowing.wait()
            server = await trio.open_tcp_stream(*self._target)
        except BaseException as exc:  # refused, or cancelled while partitioned
            with trio.CancelScope(shield=True):
                await client.aclose()
            if isinstance(exc, OSError):
                return
            raise
        self._streams |= {client, server}
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pipe, client, server, nursery.cancel_scope)
                nursery.start_soon(self._pipe, server, client, nursery.cancel_scope)
        finally:
            self._streams -= {client, server}
            for stream in (client, server):
                with trio.CancelScope(shield=True):
                    await stream.aclose()

    async def cut(self) -> None:
        """Refuse new connections; reset the open ones (RST, as a crashed host would)."""
        assert self._listener is not None and self._serving is not None
        self._serving.cancel()
        await self._listener.aclose()
        self._listener = None
        streams = list(self._streams)
        # Every socket first, with no checkpoint in between: closing one lets its pipe tasks
        # close their other side, whose socket would then be gone here.
        for stream in streams:
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for stream in streams:
            await stream.aclose()

    async def restore(self) -> None:
        await self.listen()

    def blackhole(self) -> None:
        """Stop moving bytes (a partition): nothing is refused or reset, nothing arrives."""
        if self._flowing.is_set():
            self._flowing = trio.Event()

    def heal(self) -> None:
        """End the partition: what was held back is delivered now."""
        self._flowing.set()

    async def _pipe(
        self, source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope
    ) -> None:
        try:
            while True:
                await self._flowing.wait()
                data = await source.receive_some(65536)
                if not data:
                    break
                await self._flowing.wait()
                if source in self._dropped or sink in self._dropped:
                    continue  # vanishes
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        done.cancel()

    async def aclose(self) -> None:
        if self._listener is not None:
            await self._listener.aclose()
            self._listener = None


@asynccontextmanager
async def forwarding(host: str, port: int) -> AsyncIterator[Forwarder]:
    async with trio.open_nursery() as nursery:
        forwarder = Forwarder(nursery, (host, port))
        await forwarder.listen()
        try:
            yield forwarder
        finally:
            await forwarder.aclose()
            nursery.cancel_scope.cancel()
