"""The Fine-tuning API (docs/fine_tuning.md): create, list, retrieve and cancel jobs, and list
or stream a job's events. Callers need a secret key with `fine_tuning` (or a management key).
Another organization's job is indistinguishable from a missing one (404 `job_not_found`) on
every route."""

from __future__ import annotations

from gateway.fine_tuning.create import create_job
from gateway.fine_tuning.deps import FineTuningDeps
from gateway.fine_tuning.events import send_event_stream
from gateway.fine_tuning.views import event_view, job_view
from gateway.web import Operation, Request, Response, Routes, json_response
from protocol import errors
from protocol.decoding import decode_json
from protocol.fine_tuning.api import Job, JobCancel, JobCreate, JobEvent, JobEventList, JobList
from protocol.fine_tuning.provider import ACTIVE, CANCELLED
from protocol.scopes import FINE_TUNING
from storage.fine_tuning import JobRecord, Note

_TAG = "Fine-tuning"
_AUTH = (401, 403)
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
_PAGING = (
    ("limit", "integer", f"page size, default {DEFAULT_LIMIT}, max {MAX_LIMIT}"),
    ("after", "string", "the id of the last item of the previous page"),
)


def _not_found(job_id: str) -> errors.APIError:
    return errors.not_found(
        f"No fine-tuning job with id {job_id[:80]!r}.", code="job_not_found", param="job_id"
    )


def _org(request: Request) -> str:
    assert request.principal is not None
    return request.principal.org_id


def _page(request: Request) -> tuple[int, str | None]:
    limit = request.query_int("limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
    return limit, request.query.get("after") or None


def routes(deps: FineTuningDeps) -> Routes:
    r = Routes()
    jobs = deps.jobs

    async def owned(request: Request) -> JobRecord:
        job_id = request.path_params["job_id"]
        job = await jobs.get(_org(request), job_id)
        if job is None:
            raise _not_found(job_id)
        return job

    @r.operation(
        Operation(
            "POST",
            "/v1/fine_tuning/jobs",
            "Create a fine-tuning job (queued; the training hold is taken now)",
            _TAG,
            request=JobCreate,
            response=Job,
            scope=FINE_TUNING,
            errors=(400, *_AUTH, 402, 413),
        )
    )
    async def create(request: Request) -> Response:
        body = await request.json(JobCreate)
        assert request.principal is not None
        job = await create_job(deps, request.principal, body)
        return json_response(job_view(job))

    @r.operation(
        Operation(
            "GET",
            "/v1/fine_tuning/jobs",
            "List the organization's fine-tuning jobs, newest first",
            _TAG,
            response=JobList,
            scope=FINE_TUNING,
            errors=(400, *_AUTH),
            query=_PAGING,
        )
    )
    async def list_jobs(request: Request) -> Response:
        limit, after = _page(request)
        page = await jobs.list(_org(request), limit=limit, after=after)
        return json_response(
            JobList(data=[job_view(j) for j in page.items], has_more=page.has_more)
        )

    @r.operation(
        Operation(
            "GET",
            "/v1/fine_tuning/jobs/{job_id}",
            "Retrieve a fine-tuning job",
            _TAG,
            response=Job,
            scope=FINE_TUNING,
            errors=(*_AUTH, 404),
        )
    )
    async def retrieve(request: Request) -> Response:
        return json_response(job_view(await owned(request)))

    @r.operation(
        Operation(
            "POST",
            "/v1/fine_tuning/jobs/{job_id}/cancel",
            "Cancel a queued, validating or running job (409 once it has ended); no body needed",
            _TAG,
            request=JobCancel,
            request_required=False,
            response=Job,
            scope=FINE_TUNING,
            errors=(400, *_AUTH, 404, 409, 413),
        )
    )
    async def cancel(request: Request) -> Response:
        raw = await request.body()
        if raw.strip():
            decode_json(raw, JobCancel)
        job = await owned(request)
        moved = await jobs.move(
            job.id,
            owner=None,
            from_=list(ACTIVE),
            to=CANCELLED,
            now=deps.clock.now_us(),
            note=Note("The job was cancelled", level="warn"),
            changes={"provider_cancel": True},
        )
        if moved is None:
            current = await jobs.get(job.org_id, job.id)
            status = current.status if current is not None else job.status
            raise errors.conflict(
                f"The job {job.id!r} is {status}; only queued, validating_files and running"
                " jobs can be cancelled.",
                code="job_not_cancellable",
            )
        record, refund = moved
        if refund:
            await deps.balance_changed(record, refund)
        deps.wake_watcher()  # tells the provider
        return json_response(job_view(record))

    @r.operation(
        Operation(
            "GET",
            "/v1/fine_tuning/jobs/{job_id}/events",
            "A job's events: a list, newest first; with `Accept: text/event-stream` an SSE"
            " stream, oldest first, that ends when the job has ended",
            _TAG,
            response=JobEventList,
            stream=JobEvent,
            scope=FINE_TUNING,
            errors=(400, *_AUTH, 404),
            query=_PAGING,
        )
    )
    async def events(request: Request) -> Response | None:
        job = await owned(request)
        accept = request.header(b"accept") or ""
        if "text/event-stream" in accept.lower():
            await send_event_stream(
                request,
                jobs,
                job.id,
                poll_s=deps.config.events_poll_s,
                keepalive_s=deps.sse_keepalive_s,
            )
            return None
        limit, after = _page(request)
        page = await jobs.events(job.id, limit=limit, after=after)
        return json_response(
            JobEventList(data=[event_view(e) for e in page.items], has_more=page.has_more)
        )

    return r
