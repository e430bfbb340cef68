"""The test forwarder's partition mode: bytes held while black-holed arrive once healed."""

import trio

from tests.tcp_forwarder import forwarding


async def test_blackhole_holds_bytes_then_delivers_them_late() -> None:
    received: list[bytes] = []

    async def echo(stream: trio.SocketStream) -> None:
        async for chunk in stream:
            received.append(chunk)
            await stream.send_all(chunk)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, echo, 0)
        port = listeners[0].socket.getsockname()[1]
        async with forwarding("127.0.0.1", port) as forwarder:
            async with (
                await trio.open_tcp_stream("127.0.0.1", forwarder.port) as first,
            ):
                await first.send_all(b"a")
                assert await first.receive_some(10) == b"a"
                forwarder.blackhole()
                await first.send_all(b"b")
                with trio.move_on_after(0.3) as waited:
                    await first.receive_some(10)
                assert waited.cancelled_caught and received == [b"a"]
                async with await trio.open_tcp_stream("127.0.0.1", forwarder.port) as second:
                    await second.send_all(b"c")
                    forwarder.heal()
                    assert await first.receive_some(10) == b"b"
                    assert await second.receive_some(10) == b"c"
        nursery.cancel_scope.cancel()
