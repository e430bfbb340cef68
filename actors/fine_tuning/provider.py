"""A provider's OpenAI-compatible fine-tuning API: upload a training file (multipart, streamed
from our encrypted store without holding it), create, read and cancel a job. Errors are the
upstream client's (actors/upstream.py); an answer that is not the expected object raises
ProviderJobInvalid."""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, AsyncIterator

import msgspec

from actors.upstream import UpstreamClient, mapped_errors
from protocol.fine_tuning.provider import ProviderJob, find_job_for_file, read_file_id, read_job


async def _form(
    boundary: str, filename: str, content: AsyncIterable[bytes]
) -> AsyncIterator[bytes]:
    dash = f"--{boundary}\r\n".encode()
    yield dash + b'Content-Disposition: form-data; name="purpose"\r\n\r\nfine-tune\r\n'
    yield (
        dash
        + (
            f'Content-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            "Content-Type: application/jsonl\r\n\r\n"
        ).encode()
    )
    async for piece in content:
        if piece:
            yield piece
    yield f"\r\n--{boundary}--\r\n".encode()


class FineTuningAPI:
    def __init__(self, client: UpstreamClient, api_key: str | None) -> None:
        self._client = client
        self._key = api_key  # the org's own key (bring-your-own-key), or None: the gateway's

    async def upload(self, filename: str, content: AsyncIterable[bytes]) -> str:
        """The provider's id of the uploaded file. `filename` is ours (an id), never a
        client's."""
        boundary = "gateway-" + os.urandom(16).hex()
        async with self._client.post_streamed(
            "files",
            _form(boundary, filename, content),
            content_type=f"multipart/form-data; boundary={boundary}",
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
