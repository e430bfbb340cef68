"""The end of a graceful drain for streams: those still running shortly before
`server.graceful_timeout_s` runs out are ended by their relays (actors/relay.py, `cut`) with the
API's mid-stream error frame (code `server_shutting_down`) and `data: [DONE]`, rather than
having their connections cut when the server cancels what is left at the deadline. They keep
`LAST_FRAMES_S` (a quarter of a shorter grace) to write those frames, so the stop stays within
the graceful timeout."""

from __future__ import annotations

import logging

import trio

from actors.relay import StreamRelays

log = logging.getLogger("gateway.server")
LAST_FRAMES_S = 1.0


def cut_after(graceful_s: float) -> float:
    """Seconds from the drain's start to the cut."""
    return graceful_s - min(LAST_FRAMES_S, graceful_s / 4)


async def cut_streams_when_late(
    drain_began: trio.Event, relays: StreamRelays, graceful_s: float
) -> None:
    """Once `drain_began`, wait until the cut, then end every stream still relaying (the
    caller cancels this when the drain ended first)."""
    await drain_began.wait()
    await trio.sleep(cut_after(graceful_s))
    if relays.stats.active:
        log.warning(
            "graceful drain running out: ending %d stream(s) with server_shutting_down",
            relays.stats.active,
        )
    relays.cut()
