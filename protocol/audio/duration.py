"""An audio file's duration read from its first bytes, for billing when the provider reports
none. Only WAV (RIFF/WAVE, PCM or any codec with a byte rate) is read: its `fmt ` chunk gives
the byte rate and its `data` chunk the length. Other containers (MP3 without a Xing header,
MP4, WebM) need the whole file or a demuxer; for them the caller falls back to an estimate
from the file size (docs/decisions.md, "Audio")."""

from __future__ import annotations

import struct
from decimal import Decimal

HEAD_BYTES = 4096  # enough for the RIFF header, `fmt ` and a few small chunks before `data`


def wav_duration(head: bytes, file_bytes: int) -> Decimal | None:
    """Seconds of audio in a WAV file whose first bytes are `head` and whose size is
    `file_bytes` (the `data` chunk's declared size when it fits in the file, the rest of the
    file otherwise: streamed WAVs declare 0 or 0xFFFFFFFF). None when `head` is not WAV."""
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    offset = 12
    byte_rate = 0
    while offset + 8 <= len(head):
        chunk_id = head[offset : offset + 4]
        (size,) = struct.unpack_from("<I", head, offset + 4)
        body = offset + 8
        if chunk_id == b"fmt " and body + 12 <= len(head):
            (byte_rate,) = struct.unpack_from("<I", head, body + 8)
        elif chunk_id == b"data":
            if byte_rate <= 0:
                return None
            available = max(0, file_bytes - body)
            data = size if 0 < size <= available else available
            return Decimal(data) / Decimal(byte_rate)
        offset = body + size + (size & 1)
    return None
