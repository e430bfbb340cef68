"""The OpenAI fine-tuning API of the simulated provider: files, jobs, events, fine-tuned models.

    POST   /v1/files                          multipart (purpose, file) -> file object
    GET    /v1/files/{id}, DELETE /v1/files/{id}
    POST   /v1/fine_tuning/jobs               {model, training_file, validation_file,
                                               hyperparameters, suffix, seed} -> job (queued)
    GET    /v1/fine_tuning/jobs               ?limit=&after=  newest first
    GET    /v1/fine_tuning/jobs/{id}
    POST   /v1/fine_tuning/jobs/{id}/cancel   400 once the job has ended
    GET    /v1/fine_tuning/jobs/{id}/events   ?limit=&after=  newest first
    GET    /v1/models/{model}, DELETE /v1/models/{model}   (fine-tuned models; 404 unknown)

Chat completions naming an `ft:` model that is not live here (never made, not finished,
deleted) get OpenAI's 404 `model_not_found` (`refuse_unknown_model`); live ones are answered
like any model by openai_routes.

Behavior knobs (bench/upstream/behavior.py), read once when a job is created:
- `fine_tune_schedule_s` = (queued, validating_files, running) durations in seconds of Trio's
  clock (so `MockClock` moves jobs along);
- `fine_tune_failure` = (code, message, param): the job fails with that error at the end of
  validation, or at the end of running with `fine_tune_fail_while_running`. A malformed
  training or validation file fails at validation with `invalid_format` regardless.

State lives in the server's `FineTuning` (bench/upstream/fine_tuning.py). Every route is a pure
function of the request, the behavior, that state and the clock's reading; malformed bodies,
query strings and ids are 400/404 answers, never exceptions.
"""

from __future__ import annotations

import math
import re
import secrets
import time
from typing import Any, Literal
from urllib.parse import parse_qs, unquote

import msgspec
import trio

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.fine_tuning import (
    ORGANIZATION,
    TERMINAL,
    Failure,
    FineTuning,
    Hyperparameters,
    Job,
    UploadedFile,
    dataset_tokens,
    new_job_id,
)
from bench.upstream.forms import parse_form
from bench.upstream.openai_routes import MODELS
from bench.upstream.replies import JsonReply, Reply

PURPOSES = frozenset({"fine-tune", "assistants", "batch", "vision", "user_data", "evals"})
DEFAULT_EPOCHS = 3
DEFAULT_BATCH_SIZE = 1
DEFAULT_LEARNING_RATE_MULTIPLIER = 2.0
PAGE_DEFAULT = 20
PAGE_MAX = 100
_SUFFIX = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MODEL = re.compile(r"[A-Za-z0-9._:/-]{1,256}")
_PREFIXES = ("/v1/files/", "/v1/fine_tuning/", "/v1/models/")
_encode = msgspec.json.encode

Auto = Literal["auto"]


class _Hyperparameters(msgspec.Struct):
    n_epochs: int | Auto = "auto"
    batch_size: int | Auto = "auto"
    learning_rate_multiplier: float | Auto = "auto"


class _CreateJob(msgspec.Struct):
    model: str
    training_file: str
    validation_file: str | None = None
    hyperparameters: _Hyperparameters | None = None
    suffix: str | None = None
    seed: int | None = None


class _ModelOnly(msgspec.Struct):
    model: str


_create_decoder = msgspec.json.Decoder(_CreateJob)
_model_decoder = msgspec.json.Decoder(_ModelOnly)


def error(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    kind: str = "invalid_request_error",
    headers: tuple[tuple[str, str], ...] = (),
) -> JsonReply:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JsonReply(status, _encode(body), headers)


def _model_not_found(model: str) -> JsonReply:
    return error(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        code="model_not_found",
    )


def answer(request: RecordedRequest, behavior: UpstreamBehavior, state: FineTuning) -> Reply | None:
    """The answer when the path is one of this module's; None otherwise."""
    path, _, query = request.path.partition("?")
    if path != "/v1/files" and not path.startswith(_PREFIXES):
        return None
    if not _authorized(request):
        return error(
            401, "missing or malformed Authorization: Bearer header", code="invalid_api_key"
        )
    now = trio.current_time()
    method = request.method
    if path == "/v1/files":
        return _only(method, "POST") or _upload(request, state)
    if path.startswith("/v1/files/"):
        return _file(method, unquote(path.removeprefix("/v1/files/")), state)
    if path.startswith("/v1/models/"):
        return _model(method, unquote(path.removeprefix("/v1/models/")), state, now)
    if path != "/v1/fine_tuning/jobs" and not path.startswith("/v1/fine_tuning/jobs/"):
        return error(404, f"Invalid URL ({method} {path})")
    if path == "/v1/fine_tuning/jobs":
        if method == "POST":
            return _create(request, behavior, state, now)
        return _only(method, "GET, POST") or _list_jobs(query, state, now)
    job_id, _, action = path.removeprefix("/v1/fine_tuning/jobs/").partition("/")
    job = state.jobs.get(unquote(job_id))
    if action not in ("", "cancel", "events"):
        return error(404, f"Invalid URL ({method} {path})")
    allowed = "POST" if action == "cancel" else "GET"
    refused = _only(method, allowed)
    if refused is not None:
        return refused
    if job is None:
        return error(404, f"No fine-tuning job found with id {unquote(job_id)!r}", code="not_found")
    if action == "cancel":
        if not state.cancel(job, now):
            return error(400, f"Job has already {job.status(now)}: cannot cancel", param="job_id")
        return JsonReply(200, _encode(job_object(job, now)))
    if action == "events":
        return _events(job, query, now)
    return JsonReply(200, _encode(job_object(job, now)))


def refuse_unknown_model(request: RecordedRequest, state: FineTuning) -> Reply | None:
    """A chat completion naming an `ft:` model that is not live here: OpenAI's 404."""
    if b'"ft:' not in request.body or not _authorized(request):
        return None  # the chat route answers, 401 included
    try:
        model = _model_decoder.decode(request.body).model
    except msgspec.DecodeError:
        return None  # the chat route answers 400
    if model.startswith("ft:") and state.live_model(model, trio.current_time()) is None:
        return _model_not_found(model)
    return None


def _authorized(request: RecordedRequest) -> bool:
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(credential.strip())


def _only(method: str, allowed: str) -> JsonReply | None:
    if method in allowed.split(", "):
        return None
    return error(405, f"method {method} not allowed", headers=(("allow", allowed),))


# -- files -------------------------------------------------------------------------------


def file_object(uploaded: UploadedFile) -> dict[str, Any]:
    return {
        "id": uploaded.id,
        "object": "file",
        "bytes": len(uploaded.content),
        "created_at": uploaded.created_at,
        "filename": uploaded.filename,
        "purpose": uploaded.purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }


def _upload(request: RecordedRequest, state: FineTuning) -> Reply:
    parts = parse_form(request.headers.get("content-type", ""), request.body)
    if parts is None:
        return error(400, "expected a well-formed multipart/form-data body")
    fields = {p.name: p for p in parts}
    purpose_part, file_part = fields.get("purpose"), fields.get("file")
    if purpose_part is None or purpose_part.filename is not None:
        return error(400, "missing required parameter: 'purpose'", param="purpose")
    purpose = purpose_part.data.decode("utf-8", "replace")
    if purpose not in PURPOSES:
        return error(400, f"invalid purpose {purpose!r}", param="purpose")
    if file_part is None or file_part.filename is None:
        return error(400, "missing required parameter: 'file'", param="file")
    uploaded = state.add_file(
        filename=file_part.filename[:512],
        purpose=purpose,
        content=file_part.data,
        now_unix=int(time.time()),
    )
    return JsonReply(200, _encode(file_object(uploaded)))


def _file(method: str, file_id: str, state: FineTuning) -> Reply:
    refused = _only(method, "GET, DELETE")
    if refused is not None:
        return refused
    uploaded = state.files.get(file_id)
    if uploaded is None:
        return error(404, f"No such File object: {file_id}", param="id", code="not_found")
    if method == "DELETE":
        del state.files[file_id]
        return JsonReply(200, _encode({"id": file_id, "object": "file", "deleted": True}))
    return JsonReply(200, _encode(file_object(uploaded)))


# -- models ------------------------------------------------------------------------------


def _model(method: str, name: str, state: FineTuning, now: float) -> Reply:
    refused = _only(method, "GET, DELETE")
    if refused is not None:
        return refused
    if name in MODELS:
        if method == "DELETE":
            return error(
                403, "You do not have permission to delete this model", kind="permission_error"
            )
        body = {"id": name, "object": "model", "created": 0, "owned_by": "simulator"}
        return JsonReply(200, _encode(body))
    job = state.live_model(name, now)
    if job is None:
        return _model_not_found(name)
    if method == "DELETE":
        state.delete_model(name, now)
        return JsonReply(200, _encode({"id": name, "object": "model", "deleted": True}))
    created = job.created_at + math.ceil(job.ends_after)
    return JsonReply(
        200, _encode({"id": name, "object": "model", "created": created, "owned_by": ORGANIZATION})
    )


# -- jobs --------------------------------------------------------------------------------


def job_object(job: Job, now: float) -> dict[str, Any]:
    status = job.status(now)
    finished = job.finished_after(now)
    failure = job.failure if status == "failed" else None
    hyper = job.hyperparameters
    return {
        "id": job.id,
        "object": "fine_tuning.job",
        "model": job.model,
        "created_at": job.created_at,
        "finished_at": None if finished is None else job.created_at + math.ceil(finished),
        "fine_tuned_model": job.fine_tuned_model if status == "succeeded" else None,
        "organization_id": ORGANIZATION,
        "status": status,
        "training_file": job.training_file,
        "validation_file": job.validation_file,
        "hyperparameters": {
            "n_epochs": hyper.n_epochs,
            "batch_size": hyper.batch_size,
            "learning_rate_multiplier": hyper.learning_rate_multiplier,
        },
        "trained_tokens": job.dataset_tokens * hyper.n_epochs if status == "succeeded" else None,
        "error": None
        if failure is None
        else {"code": failure.code, "message": failure.message, "param": failure.param},
        "seed": job.seed,
        "estimated_finish": None
        if status in TERMINAL
        else job.created_at + math.ceil(job.ends_after),
        "result_files": [],
        "integrations": [],
        "user_provided_suffix": job.suffix,
    }


def _create(
    request: RecordedRequest, behavior: UpstreamBehavior, state: FineTuning, now: float
) -> Reply:
    try:
        body = _create_decoder.decode(request.body)
    except msgspec.DecodeError as exc:
        return error(400, f"invalid request body: {exc}")
    checked = _hyperparameters(body.hyperparameters or _Hyperparameters())
    if isinstance(checked, JsonReply):
        return checked
    if not _MODEL.fullmatch(body.model):
        return error(400, "invalid model", param="model", code="model_not_available")
    if body.suffix is not None and not _SUFFIX.fullmatch(body.suffix):
        return error(400, "suffix must be 1-64 of A-Z a-z 0-9 _ -", param="suffix")
    if body.seed is not None and not 0 <= body.seed <= 2_147_483_647:
        return error(400, "seed must be between 0 and 2147483647", param="seed")
    training = _fine_tune_file(state, body.training_file)
    if training is None:
        return error(400, f"invalid training_file: {body.training_file}", param="training_file")
    validation = None
    if body.validation_file is not None:
        validation = _fine_tune_file(state, body.validation_file)
        if validation is None:
            message = f"invalid validation_file: {body.validation_file}"
            return error(400, message, param="validation_file")
    tokens = dataset_tokens(training.content)
    failure = _planned_failure(behavior)
    if isinstance(tokens, str):
        failure = Failure(
            "invalid_format", f"Invalid file format: {tokens}", "training_file", False
        )
        tokens = 0
    elif validation is not None and isinstance(reason := dataset_tokens(validation.content), str):
        failure = Failure(
            "invalid_format", f"Invalid file format: {reason}", "validation_file", False
        )
    queued, validating, running = (max(0.0, float(s)) for s in behavior.fine_tune_schedule_s)
    job = Job(
        id=new_job_id(),
        model=body.model,
        training_file=training.id,
        validation_file=None if validation is None else validation.id,
        hyperparameters=checked,
        suffix=body.suffix,
        seed=secrets.randbelow(2_147_483_648) if body.seed is None else body.seed,
        created_at=int(time.time()),
        started=now,
        schedule=(queued, validating, running),
        failure=failure,
        dataset_tokens=tokens,
    )
    state.add_job(job)
    return JsonReply(200, _encode(job_object(job, now)))


def _fine_tune_file(state: FineTuning, file_id: str) -> UploadedFile | None:
    uploaded = state.files.get(file_id)
    return uploaded if uploaded is not None and uploaded.purpose == "fine-tune" else None


def _planned_failure(behavior: UpstreamBehavior) -> Failure | None:
    if behavior.fine_tune_failure is None:
        return None
    code, message, param = behavior.fine_tune_failure
    return Failure(code, message, param, behavior.fine_tune_fail_while_running)


def _hyperparameters(asked: _Hyperparameters) -> Hyperparameters | JsonReply:
    epochs = DEFAULT_EPOCHS if asked.n_epochs == "auto" else asked.n_epochs
    batch = DEFAULT_BATCH_SIZE if asked.batch_size == "auto" else asked.batch_size
    rate = asked.learning_rate_multiplier
    multiplier = DEFAULT_LEARNING_RATE_MULTIPLIER if rate == "auto" else rate
    if not 1 <= epochs <= 50:
        return error(400, "n_epochs must be between 1 and 50", param="hyperparameters.n_epochs")
    if not 1 <= batch <= 256:
        return error(
            400, "batch_size must be between 1 and 256", param="hyperparameters.batch_size"
        )
    if not (0 < multiplier <= 10 and math.isfinite(multiplier)):
        param = "hyperparameters.learning_rate_multiplier"
        return error(400, "learning_rate_multiplier must be in (0, 10]", param=param)
    return Hyperparameters(epochs, batch, float(multiplier))


def _page_query(query: str) -> tuple[int, str | None] | JsonReply:
    try:
        params = parse_qs(query, max_num_fields=10, strict_parsing=False)
    except ValueError:
        return error(400, "too many query parameters")
    limit_values, after_values = params.get("limit", []), params.get("after", [])
    limit = PAGE_DEFAULT
    if limit_values:
        raw = limit_values[-1]
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 3 and 1 <= int(raw) <= PAGE_MAX):
            return error(400, f"limit must be an integer from 1 to {PAGE_MAX}", param="limit")
        limit = int(raw)
    return limit, after_values[-1] if after_values else None


def _page(items: list[dict[str, Any]], limit: int, after: str | None) -> JsonReply:
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    body = {"object": "list", "data": items[:limit], "has_more": len(items) > limit}
    return JsonReply(200, _encode(body))


def _list_jobs(query: str, state: FineTuning, now: float) -> Reply:
    page = _page_query(query)
    if isinstance(page, JsonReply):
        return page
    jobs = [job_object(job, now) for job in reversed(state.jobs.values())]
    return _page(jobs, *page)


def _events(job: Job, query: str, now: float) -> Reply:
    page = _page_query(query)
    if isinstance(page, JsonReply):
        return page
    hexpart = job.id.removeprefix("ftjob-")
    events = [
        {
            "id": f"ftevent-{hexpart}-{index:04d}",
            "object": "fine_tuning.job.event",
            "created_at": job.created_at + math.floor(event.offset_s),
            "level": event.level,
            "message": event.message,
            "type": "message",
            "data": {},
        }
        for index, event in enumerate(job.events(now))
    ]
    return _page(events[::-1], *page)
