"""A provider's fine-tuning job (OpenAI's object) read into what the watcher needs, and its
status mapped to the API's states. No I/O.

Provider statuses: validating_files, queued, running, succeeded, failed, cancelled (OpenAI);
`pending` (older APIs) reads as queued. Anything unknown reads as `running` (still going; the
watcher keeps polling) rather than guessing a terminal state."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

from protocol.errors import UpstreamMalformed

QUEUED = "queued"
VALIDATING_FILES = "validating_files"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
STATES = (QUEUED, VALIDATING_FILES, RUNNING, SUCCEEDED, FAILED, CANCELLED)
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
ACTIVE = (QUEUED, VALIDATING_FILES, RUNNING)

_ALIASES = {"pending": QUEUED}
# A provider's ids go into our request paths: only these characters are accepted.
_ID = re.compile(r"[A-Za-z0-9._:-]{1,256}")


@dataclass(frozen=True, slots=True)
class ProviderJob:
    id: str
    status: str  # one of STATES
    fine_tuned_model: str | None
    trained_tokens: int | None
    error_code: str | None
    error_message: str | None
    error_param: str | None


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def map_status(status: str) -> str:
    status = _ALIASES.get(status, status)
    return status if status in STATES else RUNNING


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def read_job(body: bytes) -> ProviderJob:
    try:
        obj = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise UpstreamMalformed("not JSON") from exc
    if not isinstance(obj, dict) or not _valid_id(obj.get("id")):
        raise UpstreamMalformed("no job id")
    status = obj.get("status")
    if not isinstance(status, str):
        raise UpstreamMalformed("no status")
    raw_error = obj.get("error")
    error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
    tokens = obj.get("trained_tokens")
    return ProviderJob(
        id=obj["id"],
        status=map_status(status),
        fine_tuned_model=_text(obj.get("fine_tuned_model")),
        trained_tokens=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
        error_code=_text(error.get("code")),
        error_message=_text(error.get("message")),
        error_param=_text(error.get("param")),
    )


def find_job_for_file(body: bytes, training_file: str) -> ProviderJob | None:
    """In a provider's job list, the job created with `training_file` (ours alone: uploaded for
    one job), or None."""
    try:
        obj = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise UpstreamMalformed("not JSON") from exc
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list):
        raise UpstreamMalformed("not a list of jobs")
    for item in data:
        if isinstance(item, dict) and item.get("training_file") == training_file:
            return read_job(msgspec.json.encode(item))
    return None


def read_file_id(body: bytes) -> str:
    try:
        obj = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise UpstreamMalformed("not JSON") from exc
    if not isinstance(obj, dict) or not _valid_id(obj.get("id")):
        raise UpstreamMalformed("no file id")
    return str(obj["id"])
