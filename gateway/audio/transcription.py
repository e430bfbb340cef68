"""POST /v1/audio/transcriptions and /v1/audio/translations: the client's form is read as it
streams in and relayed to the provider as it is read, so a 24 MB file is never held in memory.

The model decides where the file goes. When `model` comes before `file` (as the SDKs send it),
the file goes upstream as it arrives, counted (400 `file_too_large` past the limit, the rest
never read), and fields after the file are checked and appended after it. When the file comes
first (OpenAI's own curl example: `-F file=@audio.mp3 -F model=whisper-1`), it is held until
the rest of the form is read — in memory up to 1 MiB, past it in an encrypted temporary file
(gateway/web/spool.py), never past the limit — and then relayed with every field before it.
The provider is always asked for verbose_json: its `duration` is what is billed (per minute),
and the client's format is rendered from it here. Without a duration, a WAV file's header gives
it; otherwise the file size at the reservation's bitrate does."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from decimal import Decimal

import msgspec

from actors.upstream import mapped_errors
from gateway.inference.admission import admit_model, reserve_units
from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.web.multipart import Form, MultipartLimits, Part
from gateway.web.request import Request
from gateway.web.responses import Response
from gateway.web.spool import SpooledFile
from protocol.audio import transcript
from protocol.audio.duration import HEAD_BYTES, wav_duration
from protocol.audio.transcription import (
    GRANULARITIES_FIELD,
    MIN_BYTES_PER_SECOND,
    TranscriptionFields,
    check_filename,
    file_too_large,
    reserved_minutes,
)
from protocol.errors import APIError, invalid_request
from protocol.multipart_form import FormEncoder

# What one form may hold: the file, the seven documented fields, and a few an SDK may add.
FORM_LIMITS = MultipartLimits(max_parts=16)
# The file part's Content-Type upstream, by the extension the provider reads the format from.
_FILE_TYPES = {
    "mp3": "audio/mpeg",
    "mpga": "audio/mpeg",
    "mpeg": "audio/mpeg",
    "mp4": "audio/mp4",
    "m4a": "audio/mp4",
    "wav": "audio/wav",
    "webm": "audio/webm",
}
# The most the form adds to its file (every other part's headers and value, and boundaries):
# the route's body limit is the file limit plus this.
FORM_OVERHEAD_BYTES = FORM_LIMITS.max_parts * (
    FORM_LIMITS.max_header_bytes + FORM_LIMITS.max_field_bytes + 256
)


class Transcribe:
    """One of the two routes: `task` is "transcription" or "translation" (the capability)."""

    def __init__(self, deps: InferenceDeps, task: str, max_file_bytes: int) -> None:
        self._deps = deps
        self._task = task
        self._path = "audio/transcriptions" if task == "transcription" else "audio/translations"
        self._max_file_bytes = max_file_bytes

    async def __call__(self, http: Request) -> Response:
        deps = self._deps
        call = Call(http)
        declared = http.content_length
        if declared is not None and declared > self._max_file_bytes + FORM_OVERHEAD_BYTES:
            raise file_too_large(self._max_file_bytes)  # before reading any of the body
        fields = TranscriptionFields()
        async with http.multipart(FORM_LIMITS) as form:
            forwarded: list[tuple[str, str]] = []
            file_part = await _fields_before_file(form, fields, forwarded)
            extension = check_filename(file_part.filename)
            held: SpooledFile | None = None
            if fields.model is None:
                held = await self._hold(file_part)
                async for part in form:  # the rest of the form: small fields only
                    await _read_field(part, fields, forwarded)
                fields.check()
                if fields.model is None:
                    raise _missing("model")
            elif "response_format" in fields.seen:
                fields.check()
            model, price = await admit_model(call, deps, fields.model, capability=self._task)
            unit_price = price.usd_per_minute if price is not None else None
            most = reserved_minutes(held.size if held else declared or self._max_file_bytes)
            await reserve_units(call, deps, unit_price, capability=self._task, units=most)
            try:
                upload = _Upload(self._max_file_bytes)
                client = deps.upstreams.get(model.provider.name)
                sent = upload.body(
                    held.chunks() if held else file_part,
                    None if held else form,
                    fields,
                    forwarded,
                    model.upstream,
                    extension,
                )
                async with client.post_streamed(
                    self._path,
                    sent,
                    content_type=upload.form.content_type,
                    accept="application/json",
                    api_key=call.own_key,
                ) as response:
                    with mapped_errors(client.name):
                        raw = await response.read(client.max_response_bytes)
                try:
                    result = transcript.decode(raw)
                except (msgspec.ValidationError, msgspec.DecodeError):
                    raise APIError(
                        502,
                        f"The upstream provider {client.name!r} sent an unreadable transcription.",
                        type="upstream_error",
                        code="upstream_bad_response",
                    ) from None
                seconds = transcript.duration_seconds(result)
                if seconds is None:
                    seconds = upload.duration()
                call.charge_units(min(seconds / 60, most), unit_price)
            finally:
                call.close_bill()
        body, content_type = transcript.render(result, fields.response_format, raw)
        return Response(body, content_type=content_type.encode())

    async def _hold(self, file_part: Part) -> SpooledFile:
        """The file, held until `model` arrives (closed with the form); 400 past the limit."""
        try:
            return await file_part.spool(max_bytes=self._max_file_bytes)
        except APIError as exc:
            if exc.code == "file_too_large":
                raise file_too_large(self._max_file_bytes) from None
            raise


def _missing(name: str) -> APIError:
    return invalid_request(
        f"The form has no `{name}` {'part' if name == 'file' else 'field'}.",
        param=name,
        code="missing_required_field",
    )


async def _fields_before_file(
    form: Form, fields: TranscriptionFields, forwarded: list[tuple[str, str]]
) -> Part:
    """Read the fields up to the file part, which is returned unread; 400 when the form has
    no file (or neither file nor model)."""
    async for part in form:
        if part.name == "file":
            return part
        await _read_field(part, fields, forwarded)
    raise _missing("file" if fields.model else "model")


async def _read_field(
    part: Part, fields: TranscriptionFields, forwarded: list[tuple[str, str]]
) -> None:
    """Take one non-file field, adding it to `forwarded` when it goes to the provider."""
    if part.name == "file":
        raise invalid_request(
            "The form has more than one `file` part.", param="file", code="duplicate_part"
        )
    value = await part.text()  # capped at FORM_LIMITS.max_field_bytes, unknown fields too
    if fields.add(part.name, value):
        name = GRANULARITIES_FIELD if part.name.startswith("timestamp_") else part.name
        forwarded.append((name, value))


class _Upload:
    """The upstream form as it is sent, and what was seen of the file (its size and first
    bytes, for the duration when the provider reports none)."""

    def __init__(self, max_file_bytes: int) -> None:
        self.form = FormEncoder()
        self.size = 0
        self.head = b""
        self._max = max_file_bytes

    async def body(
        self,
        file: AsyncIterable[bytes],
        rest: Form | None,
        fields: TranscriptionFields,
        forwarded: list[tuple[str, str]],
        upstream_model: str,
        extension: str,
    ) -> AsyncIterator[bytes]:
        """The fields read so far, the file as it arrives (or from where it was held), then
        the fields after it when the `rest` of the form is still to be read."""
        encode = self.form
        before = [encode.field("model", upstream_model)]
        before.append(encode.field("response_format", "verbose_json"))
        before += [encode.field(name, value) for name, value in forwarded]
        # The provider sees `audio.<extension>` (what it reads the format from), never the
        # client's filename.
        content_type = _FILE_TYPES.get(extension, "application/octet-stream")
        yield b"".join(before) + encode.file_head("file", f"audio.{extension}", content_type)
        async for data in file:
            self.size += len(data)
            if self.size > self._max:
                raise file_too_large(self._max)
            if len(self.head) < HEAD_BYTES:
                self.head += data[: HEAD_BYTES - len(self.head)]
            yield data
        late: list[tuple[str, str]] = []
        if rest is not None:
            async for part in rest:
                await _read_field(part, fields, late)
            fields.check()
        after = [encode.field(name, value) for name, value in late]
        yield encode.file_end() + b"".join(after) + encode.end()

    def duration(self) -> Decimal:
        """Seconds of audio when the provider said nothing: the WAV header's, else the size
        at the reservation's bitrate (the charge never exceeds what was held)."""
        wav = wav_duration(self.head, self.size)
        if wav is not None:
            return wav
        return Decimal(self.size) / MIN_BYTES_PER_SECOND
