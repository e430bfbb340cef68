"""Raw HTTP/1.1 over a real socket, for tests that must send what no client library would."""

from __future__ import annotations

import trio


class Raw:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def connect(cls, url: str) -> Raw:
        host, port = url.removeprefix("http://").split(":")
        return cls(await trio.open_tcp_stream(host, int(port)))

    async def _more(self) -> bool:
        try:
            chunk = await self.stream.receive_some()
        except trio.BrokenResourceError:  # reset: the same as closed here
            chunk = b""
        self.buffer += chunk
        return bool(chunk)

    async def response(self) -> tuple[int | None, bytes, bytes]:
        """One response: (status, head, body), Content-Length or chunked framed; status None
        when the server closed without answering. Callers bound it with `trio.fail_after`."""
        while b"\r\n\r\n" not in self.buffer:
            if not await self._more():
                assert not self.buffer, self.buffer
                return None, b"", b""
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        length = 0
        chunked = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
            elif name.lower() == b"transfer-encoding":
                chunked = True
        status = int(head.split(b" ")[1])
        if status == 100:
            return await self.response()
        if chunked:
            while not self.buffer.endswith(b"0\r\n\r\n"):
                assert await self._more()
            body, self.buffer = self.buffer, b""
            return status, head, body
        while len(self.buffer) < length:
            assert await self._more()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, head, body

    async def closed(self) -> bool:
        """Whether the server closes the connection without sending more."""
        try:
            return await self.stream.receive_some() == b""
        except trio.BrokenResourceError:
            return True

    async def aclose(self) -> None:
        await self.stream.aclose()


def get(path: str, extra: bytes = b"") -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nhost: t\r\n" + extra + b"\r\n"
