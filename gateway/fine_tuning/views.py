"""Stored jobs and events as the API shows them."""

from __future__ import annotations

from protocol.fine_tuning.api import Hyperparameters, Job, JobError, JobEvent
from storage.fine_tuning import JobEventRecord, JobRecord

_US = 1_000_000


def _s(us: int | None) -> int | None:
    return None if us is None else us // _US


def job_view(job: JobRecord) -> Job:
    error = None
    if job.error_code is not None:
        error = JobError(
            code=job.error_code, message=job.error_message or "", param=job.error_param
        )
    return Job(
        id=job.id,
        model=job.model,
        training_file=job.training_file,
        validation_file=job.validation_file,
        status=job.status,
        hyperparameters=Hyperparameters(
            n_epochs=job.n_epochs,
            batch_size=job.batch_size,
            learning_rate_multiplier=float(job.learning_rate_multiplier),
        ),
        fine_tuned_model=job.fine_tuned_model,
        created_at=job.created_at // _US,
        estimated_finish=_s(job.estimated_finish),
        finished_at=_s(job.finished_at),
        trained_tokens=job.trained_tokens,
        suffix=job.suffix,
        seed=job.seed,
        error=error,
        organization_id=job.org_id,
    )


def event_view(event: JobEventRecord) -> JobEvent:
    return JobEvent(
        id=event.id,
        created_at=event.created_at // _US,
        level=event.level,
        message=event.message,
        data=event.data,
    )
