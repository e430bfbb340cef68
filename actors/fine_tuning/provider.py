"""A provider's OpenAI-compatible fine-tuning API: upload a training file (multipart, streamed
from our encrypted store without holding it), create, read and cancel a job. Errors are the
upstream client's (actors/upstream.py); an answer that is not the expected object raises
UpstreamMalformed."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import msgspec

from actors.upstream import UpstreamClient, mapped_errors
from protocol.fine_tuning.provider import ProviderJob, find_job_for_file, read_file_id, read_job
from protocol.multipart_form import FormEncoder


async def _form(
    encoder: FormEncoder, filename: str, content: AsyncIterable[bytes]
) -> AsyncIterator[bytes]:
    yield encoder.field("purpose", "fine-tune")
    yield encoder.file_head("file", filename, "application/jsonl")
    async for piece in content:
        if piece:
            yield piece
    yield encoder.file_end() + encoder.end()


class FineTuningAPI:
    def __init__(self, client: UpstreamClient, api_key: str | None) -> None:
        self._client = client
        self._key = api_key  # the org's own key (bring-your-own-key), or None: the gateway's

    async def upload(self, filename: str, content: AsyncIterable[bytes]) -> str:
        """The provider's id of the uploaded file. `filename` is ours (an id), never a
        client's."""
        encoder = FormEncoder()
        async with self._client.post_streamed(
            "files",
            _form(encoder, filename, content),
            content_type=encoder.content_type,
            api_key=self._key,
        ) as response:
            with mapped_errors(self._client.name):
                body = await response.read(self._client.max_response_bytes)
        return read_file_id(body)

    async def create(self, request: dict[str, object]) -> ProviderJob:
        body, _ = await self._client.post_json(
            "fine_tuning/jobs", msgspec.json.encode(request), api_key=self._key
        )
        return read_job(body)

    async def get(self, job_id: str) -> ProviderJob:
        return read_job(
            await self._client.get_json(f"fine_tuning/jobs/{job_id}", api_key=self._key)
        )

    async def created_with(self, training_file: str) -> ProviderJob | None:
        """The job already created with `training_file`, if any (among the provider's newest
        100): a watcher that stopped between creating a job and storing its id finds it."""
        body = await self._client.get_json("fine_tuning/jobs?limit=100", api_key=self._key)
        return find_job_for_file(body, training_file)

    async def cancel(self, job_id: str) -> ProviderJob:
        body, _ = await self._client.post_json(
            f"fine_tuning/jobs/{job_id}/cancel", b"", api_key=self._key
        )
        return read_job(body)
