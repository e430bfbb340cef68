"""The ASGI types the server and the request layer share (the interface between them). The
one exception for "the client left", which both raise, is gateway/errors.py's
`ClientDisconnected`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]  # Hypercorn's wrapper wants a narrower signature
