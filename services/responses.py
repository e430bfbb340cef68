"""Stored responses, sealed: each row's content (the response object and its whole context)
is encrypted under its own data key, which is sealed under the master key (FILE_KEYS, as
files' and images' are, context (org id, response id)). A master-key rotation re-seals the data
key only (storage/keyring.py SEALED_COLUMNS).

Retention is 30 days from creation (the API's): a lookup treats an expired row as absent at
once, the janitor deletes it later (actors/responses_janitor.py). Times come from `clock` (wall
microseconds; actors/webhooks/clock.py WallClock moves with Trio's clock, so a MockClock drives
expiry in tests).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from protocol.blobcrypt import new_data_key
from protocol.errors import SecretBoxError, server_error
from protocol.responses.objects import ResponseObject
from protocol.secretbox import SecretBox, unwrap_data_key, wrap_data_key
from services.keyring import recheck_after_failure
from storage.responses import ResponseRecord, ResponseRepository

log = logging.getLogger("gateway.responses")

RETENTION_US = 30 * 86_400 * 1_000_000
# The purpose of the box a row's own data key makes (its label differs from every master-key
# purpose, so content never opens under a master-derived key nor the other way round).
RESPONSE_CONTENT = "response-content"


class _Content(msgspec.Struct):
    response: msgspec.Raw
    input: list[dict[str, Any]]


class _Output(msgspec.Struct):
    output: list[dict[str, Any]]


_decode_content = msgspec.json.Decoder(_Content).decode
_decode_output = msgspec.json.Decoder(_Output).decode


@dataclass(frozen=True, slots=True)
class StoredResponse:
    body: bytes  # the response object's JSON, as the create answered it
    output: list[dict[str, Any]]  # its output items
    input: list[dict[str, Any]]  # the context the model saw: the chain, then its own input

    def context(self) -> list[dict[str, Any]]:
        """What a continuation prepends: this response's input, then its output."""
        return [*self.input, *self.output]


class ResponseStore:
    def __init__(self, repo: ResponseRepository, box: SecretBox, clock: Callable[[], int]) -> None:
        self._repo = repo
        self._box = box  # FILE_KEYS under the master key
        self.clock = clock  # wall microseconds

    async def save(
        self,
        org_id: str,
        response: ResponseObject | dict[str, Any],
        input: list[dict[str, Any]],
        *,
        created_us: int,
    ) -> None:
        """Committed when this returns: readable on every instance at once."""
        response_id, model = (
            (response.id, response.model)
            if isinstance(response, ResponseObject)
            else (str(response["id"]), str(response["model"]))
        )
        context = (org_id, response_id)
        data_key = new_data_key()
        plaintext = msgspec.json.encode({"response": response, "input": input}).decode()
        await self._repo.insert(
            ResponseRecord(
                id=response_id,
                org_id=org_id,
                model=model,
                data_key_sealed=wrap_data_key(self._box, data_key, context),
                content_encrypted=SecretBox(data_key, RESPONSE_CONTENT).seal(plaintext, context),
                created_at=created_us,
                expires_at=created_us + RETENTION_US,
            )
        )

    async def load(self, org_id: str, response_id: str) -> StoredResponse | None:
        """The organization's unexpired response; None if unknown, another org's, deleted or
        expired. A row that does not open (a master key it was not sealed under) is a 500."""
        record = await self._repo.get(org_id, response_id, now=self.clock())
        if record is None:
            return None
        context = (record.org_id, record.id)
        try:
            data_key = unwrap_data_key(self._box, record.data_key_sealed, context)
            text = SecretBox(data_key, RESPONSE_CONTENT).open(record.content_encrypted, context)
            content = _decode_content(text)
            body = bytes(content.response)
            return StoredResponse(body, _decode_output(body).output, content.input)
        except (SecretBoxError, ValueError):
            await recheck_after_failure(self._box)  # master_key_rotated if that is why
            log.exception("stored response %s does not open", record.id)
            raise server_error("The stored response could not be read.") from None

    async def delete(self, org_id: str, response_id: str) -> bool:
        return await self._repo.delete(org_id, response_id, now=self.clock())
