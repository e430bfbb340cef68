"""One job's steps, each run by the watcher holding the job's lease: validate the dataset
(ours, before anything leaves), upload it, create the provider's job, then follow it to a
terminal state. Every id learnt from the provider is stored before the next step, so a watcher
resuming after a restart continues where the last one stopped and never uploads or creates
twice (docs/fine_tuning.md, "The watcher").

`step(job)` returns the seconds to wait before the next step (0: at once) or None when the
job needs no more watching. Provider errors that may pass (5xx, 408, 429, timeouts, refused
connections, a malformed answer) are retried with the backoff; a refusal (other 4xx) fails the
job with the provider's error; a provider job that is gone (404) fails it with
`provider_job_not_found`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from actors.fine_tuning.provider import FineTuningAPI
from actors.fine_tuning.settings import FineTuningConfig
from actors.upstream import Upstreams
from actors.webhooks.clock import WallClock
from protocol.errors import APIError, BlobCorrupt, DatasetError, UpstreamError, UpstreamStatusError
from protocol.fine_tuning.dataset import DatasetCheck
from protocol.fine_tuning.provider import (
    ACTIVE,
    CANCELLED,
    FAILED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TERMINAL,
    VALIDATING_FILES,
    ProviderJob,
)
from protocol.fine_tuning.rules import fine_tuned_model_name, training_charge
from services.files import FileStore
from services.provider_keys import ProviderKeyResolver
from storage.fine_tuning import FineTuningRepository, JobRecord, Note

log = logging.getLogger("gateway.fine_tuning")

SUCCEEDED_EVENT = "fine_tuning.job.succeeded"
FAILED_EVENT = "fine_tuning.job.failed"


class ModelRegistrar(Protocol):
    """Where a succeeded job's model is registered for its organization (storage, ft-models)."""

    async def register(
        self,
        *,
        model_id: str,
        org_id: str,
        provider: str,
        upstream_model: str,
        base_model: str,
        job_id: str,
        created_at_us: int,
    ) -> None: ...


# A job's hold or refund moved its org's balance by `micros` (negative: taken): tell the
# accountant (actors/fine_tuning/balance.py).
BalanceChanged = Callable[[JobRecord, int], Awaitable[None]]


@dataclass(frozen=True)
class WatcherDeps:
    repo: FineTuningRepository
    files: FileStore
    upstreams: Upstreams
    provider_keys: ProviderKeyResolver
    registrar: ModelRegistrar | None
    config: FineTuningConfig
    clock: WallClock
    balance_changed: BalanceChanged  # a refund was written: tell the accountant


class Backoff:
    """The wait before the next poll: `poll_initial_s`, doubling up to `poll_max_s`."""

    def __init__(self, config: FineTuningConfig) -> None:
        self._initial = config.poll_initial_s
        self._max = config.poll_max_s
        self._delay = config.poll_initial_s

    def reset(self) -> float:
        self._delay = self._initial
        return self._delay

    def next(self) -> float:
        delay = self._delay
        self._delay = min(self._delay * 2, self._max)
        return delay


class _Fail(Exception):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


def webhook_data(job: JobRecord) -> dict[str, Any]:
    data: dict[str, Any] = {
        "job_id": job.id,
        "model": job.model,
        "training_file": job.training_file,
        "status": job.status,
        "fine_tuned_model": job.fine_tuned_model,
    }
    if job.error_code is not None:
        data["error"] = {
            "code": job.error_code,
            "message": job.error_message,
            "param": job.error_param,
        }
    return data


def _notify_succeeded(job: JobRecord) -> tuple[str, dict[str, Any]]:
    return SUCCEEDED_EVENT, webhook_data(job)


def _notify_failed(job: JobRecord) -> tuple[str, dict[str, Any]]:
    return FAILED_EVENT, webhook_data(job)


def provider_error(exc: UpstreamStatusError) -> _Fail:
    """A provider's refusal as the job's error: its own code, message and param when the body
    is OpenAI's error shape."""
    code, message, param = f"provider_error_{exc.status}", None, None
    try:
        body = msgspec.json.decode(exc.body)
    except msgspec.DecodeError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        if isinstance(error.get("code"), str) and error["code"]:
            code = error["code"]
        if isinstance(error.get("message"), str):
            message = error["message"][:1000]
        if isinstance(error.get("param"), str):
            param = error["param"][:200]
    return _Fail(code, message or f"The provider refused the job (HTTP {exc.status}).", param)


def _retryable(exc: UpstreamStatusError) -> bool:
    return exc.status in (408, 409, 425, 429) or exc.status >= 500


class JobSteps:
    def __init__(self, deps: WatcherDeps, owner: str) -> None:
        self._d = deps
        self._owner = owner

    async def step(self, job: JobRecord, backoff: Backoff) -> float | None:
        if job.status == CANCELLED:
            return await self._cancel_at_provider(job, backoff)
        if job.status in TERMINAL:
            return None
        try:
            return await self._advance(job, backoff)
        except _Fail as fail:
            await self._fail(job, fail)
            return None
        except UpstreamStatusError as exc:
            if _retryable(exc):
                log.warning("job %s: provider answered %s; retrying", job.id, exc.status)
                return backoff.next()
            if exc.status == 404 and job.provider_job_id is not None:
                await self._fail(
                    job,
                    _Fail(
                        "provider_job_not_found",
                        f"The provider no longer knows the job {job.provider_job_id!r}.",
                    ),
                )
                return None
            await self._fail(job, provider_error(exc))
            return None
        except UpstreamError as exc:
            log.warning("job %s: provider call failed (%s); retrying", job.id, exc)
            return backoff.next()

    async def _advance(self, job: JobRecord, backoff: Backoff) -> float | None:
        repo, owner = self._d.repo, self._owner
        if job.status == QUEUED:
            await self._move(job, [QUEUED], VALIDATING_FILES, Note("Validating training file"))
            return 0
        if job.dataset_tokens is None:
            tokens = await self._validate(job)
            done = await repo.record(job.id, owner, dataset_tokens=tokens)
            return None if done is None else 0
        api = await self._api(job)
        if job.provider_training_file is None:
            file_id = await self._upload(api, job, job.training_file, "training_file")
            done = await repo.record(job.id, owner, provider_training_file=file_id)
            return None if done is None else 0
        if job.validation_file is not None and job.provider_validation_file is None:
            file_id = await self._upload(api, job, job.validation_file, "validation_file")
            done = await repo.record(job.id, owner, provider_validation_file=file_id)
            return None if done is None else 0
        if job.provider_job_id is None:
            created = await api.created_with(job.provider_training_file)
            if created is None:
                created = await api.create(self._create_body(job))
            stored = await repo.record(job.id, owner, provider_job_id=created.id)
            if stored is None:
                return None
            return await self._follow(stored, created, backoff)
        return await self._follow(job, await api.get(job.provider_job_id), backoff)

    def _create_body(self, job: JobRecord) -> dict[str, object]:
        body: dict[str, object] = {
            "model": job.upstream_model,
            "training_file": job.provider_training_file,
            "hyperparameters": {
                "n_epochs": job.n_epochs,
                "batch_size": job.batch_size,
                "learning_rate_multiplier": float(job.learning_rate_multiplier),
            },
            "seed": job.seed,
        }
        if job.provider_validation_file is not None:
            body["validation_file"] = job.provider_validation_file
        if job.suffix is not None:
            body["suffix"] = job.suffix
        return body

    async def _follow(self, job: JobRecord, seen: ProviderJob, backoff: Backoff) -> float | None:
        if job.status == CANCELLED:
            return 0  # cancelled while this step ran: the next step tells the provider
        if seen.status in (QUEUED, VALIDATING_FILES):
            return backoff.next()
        if seen.status in (RUNNING, SUCCEEDED) and job.status == VALIDATING_FILES:
            moved = await self._move(
                job, [VALIDATING_FILES], RUNNING, Note("Fine-tuning job started")
            )
            if moved is None:
                return 0  # changed meanwhile (a cancel): look again
            if seen.status == RUNNING:
                return backoff.reset()
            job = moved
        if seen.status == RUNNING:
            return backoff.next()
        if seen.status == SUCCEEDED:
            await self._succeed(job, seen)
            return None
        if seen.status == FAILED:
            await self._fail(
                job,
                _Fail(
                    seen.error_code or "provider_error",
                    seen.error_message or "The provider's job failed.",
                    seen.error_param,
                ),
            )
            return None
        # cancelled at the provider (not through us)
        moved = await self._move(
            job, ACTIVE, CANCELLED, Note("The provider cancelled the job", level="warn")
        )
        return None if moved is not None else 0

    async def _succeed(self, job: JobRecord, seen: ProviderJob) -> None:
        if seen.fine_tuned_model is None:
            await self._fail(
                job, _Fail("provider_error", "The provider's job succeeded without a model.")
            )
            return
        name = fine_tuned_model_name(job.model, job.org_id, job.suffix, job.id)
        now = self._d.clock.now_us()
        if self._d.registrar is not None:
            await self._d.registrar.register(
                model_id=name,
                org_id=job.org_id,
                provider=job.provider,
                upstream_model=seen.fine_tuned_model,
                base_model=job.model,
                job_id=job.id,
                created_at_us=now,
            )
        tokens = job.dataset_tokens or 0
        charge = 0
        if not job.byok and job.training_usd_per_mtok is not None:
            charge = training_charge(
                tokens, job.n_epochs, job.training_usd_per_mtok, job.fee_percent
            )
        await self._move(
            job,
            [RUNNING],
            SUCCEEDED,
            Note(
                f"The job has successfully completed; new model: {name}",
                data={"fine_tuned_model": name},
            ),
            changes={
                "fine_tuned_model": name,
                "provider_model": seen.fine_tuned_model,
                "trained_tokens": tokens * job.n_epochs,
            },
            charge=charge,
            notify=_notify_succeeded,
        )

    async def _fail(self, job: JobRecord, fail: _Fail) -> None:
        await self._move(
            job,
            ACTIVE,
            FAILED,
            Note(f"The job failed: {fail.message}", level="error", data={"code": fail.code}),
            changes={
                "error_code": fail.code,
                "error_message": fail.message,
                "error_param": fail.param,
            },
            notify=_notify_failed,
        )

    async def _move(
        self,
        job: JobRecord,
        from_: tuple[str, ...] | list[str],
        to: str,
        note: Note,
        *,
        changes: dict[str, Any] | None = None,
        charge: int | None = None,
        notify: Any = None,
    ) -> JobRecord | None:
        moved = await self._d.repo.move(
            job.id,
            owner=self._owner,
            from_=list(from_),
            to=to,
            now=self._d.clock.now_us(),
            note=note,
            changes=changes,
            charge_micros=charge,
            notify=notify,
        )
        if moved is None:
            return None
        record, refund = moved
        if refund:
            await self._d.balance_changed(record, refund)
        return record

    async def _cancel_at_provider(self, job: JobRecord, backoff: Backoff) -> float | None:
        if not job.provider_cancel:
            return None
        if job.provider_job_id is not None:
            try:
                api = await self._api(job)
                await api.cancel(job.provider_job_id)
            except _Fail as fail:
                log.warning("job %s: not cancelled at the provider: %s", job.id, fail.message)
            except UpstreamStatusError as exc:
                if _retryable(exc):
                    return backoff.next()
                # 4xx: already over, or gone, at the provider: nothing left to cancel
            except UpstreamError:
                return backoff.next()
        await self._d.repo.provider_cancelled(job.id, self._owner)
        return None

    async def _api(self, job: JobRecord) -> FineTuningAPI:
        try:
            client = self._d.upstreams.get(job.provider)
        except KeyError:
            raise _Fail(
                "provider_not_configured", f"The provider {job.provider!r} is no longer configured."
            ) from None
        key = None
        if job.byok:
            try:
                key = await self._d.provider_keys.lookup(job.org_id, job.provider)
            except APIError as exc:
                raise _Fail("provider_key_unreadable", exc.message) from None
            if key is None:
                raise _Fail(
                    "provider_key_missing",
                    f"The organization's own key for {job.provider!r} was removed; the job,"
                    " created with it, cannot continue on the gateway's key.",
                )
        return FineTuningAPI(client, key)

    @asynccontextmanager
    async def _content(
        self, job: JobRecord, file_id: str, param: str
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        record = await self._d.files.repo.get(job.org_id, file_id, now=self._d.clock.now_us())
        if record is None:
            raise _Fail("file_not_found", f"The file {file_id!r} no longer exists.", param)
        try:
            plain = await self._d.files.open_plaintext(record)
        except BlobCorrupt:
            raise _Fail("file_corrupt", f"The file {file_id!r} cannot be read.", param) from None
        async with aclosing(plain) as pieces:
            try:
                yield pieces
            except BlobCorrupt:
                raise _Fail(
                    "file_corrupt", f"The file {file_id!r} cannot be read.", param
                ) from None

    async def _validate(self, job: JobRecord) -> int:
        """The training file's tokens, after both files passed our check (DatasetError fails
        the job)."""
        tokens = 0
        files = [("training_file", job.training_file)]
        if job.validation_file is not None:
            files.append(("validation_file", job.validation_file))
        for param, file_id in files:
            check = DatasetCheck(param, self._d.config.max_example_tokens)
            try:
                async with self._content(job, file_id, param) as pieces:
                    async for piece in pieces:
                        check.feed(piece)
                counted = check.finish()
            except DatasetError as exc:
                raise _Fail(exc.code, exc.message, exc.param) from None
            if param == "training_file":
                tokens = counted
        return tokens

    async def _upload(self, api: FineTuningAPI, job: JobRecord, file_id: str, param: str) -> str:
        async with self._content(job, file_id, param) as pieces:
            return await api.upload(f"{file_id}.jsonl", pieces)
