"""The simulated provider's fine-tuning state: uploaded files, jobs and the models they made.

One `FineTuning` lives on the `UpstreamServer` (not in `UpstreamBehavior`, which is copied per
request and may be replaced by a test mid-run): it outlives requests and behaviors, and tests
inspect it (`files`, `jobs`, `statistics()`).

A job never changes by itself: its status is a pure function of the time elapsed since its
creation (Trio's clock, so `MockClock` drives it) and of a plan fixed when it was created from
the behavior knobs — the `(queued, validating_files, running)` durations, and a failure if one
was asked for — plus a cancellation, the only thing recorded later. Timeline of a job created
at t with durations (q, v, r):

    [t, t+q) queued · [t+q, t+q+v) validating_files · [t+q+v, t+q+v+r) running · then succeeded

A failure ends the job `failed` at t+q+v (at the end of validation) or, when planned to fail
while running, at t+q+v+r. A malformed training file (a line that is not a JSON object with a
`messages` list, or no example at all) fails at validation with `invalid_format` whatever the
knobs say. A cancel at elapsed time c before the end makes the job `cancelled` from c on.

The model a succeeded job made is live until deleted. No I/O here; `now` is always passed in.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from bench.upstream.completion import PER_MESSAGE_TOKENS

ORGANIZATION = "org-bench"

Status = Literal["queued", "validating_files", "running", "succeeded", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class UploadedFile:
    id: str  # file-<hex>
    filename: str
    purpose: str
    content: bytes
    created_at: int  # unix seconds


@dataclass(frozen=True, slots=True)
class Failure:
    code: str
    message: str
    param: str | None
    while_running: bool  # fail at the end of running, else at the end of validation


@dataclass(frozen=True, slots=True)
class Hyperparameters:
    n_epochs: int
    batch_size: int
    learning_rate_multiplier: float


@dataclass(frozen=True, slots=True)
class Event:
    offset_s: float  # since the job's creation
    level: Literal["info", "warn", "error"]
    message: str


@dataclass(slots=True)
class Job:
    id: str  # ftjob-<hex>
    model: str
    training_file: str
    validation_file: str | None
    hyperparameters: Hyperparameters
    suffix: str | None
    seed: int
    created_at: int  # unix seconds (what the wire shows)
    started: float  # Trio time at creation (what the schedule runs on)
    schedule: tuple[float, float, float]  # queued, validating_files, running durations
    failure: Failure | None
    dataset_tokens: int
    cancelled_after: float | None = None  # elapsed seconds when cancelled

    @property
    def fine_tuned_model(self) -> str:
        """The name the model gets if the job succeeds (OpenAI's shape; empty suffix allowed)."""
        return f"ft:{self.model}:bench:{self.suffix or ''}:{self.id.removeprefix('ftjob-')[:8]}"

    @property
    def ends_after(self) -> float:
        """Elapsed seconds at which the job reaches its planned terminal state."""
        queued, validating, running = self.schedule
        if self.failure is not None and not self.failure.while_running:
            return queued + validating
        return queued + validating + running

    def elapsed(self, now: float) -> float:
        return max(0.0, now - self.started)

    def status(self, now: float) -> Status:
        elapsed = self.elapsed(now)
        if self.cancelled_after is not None and elapsed >= self.cancelled_after:
            return "cancelled"
        queued, validating, _ = self.schedule
        if elapsed >= self.ends_after:
            return "failed" if self.failure is not None else "succeeded"
        if elapsed >= queued + validating:
            return "running"
        if elapsed >= queued:
            return "validating_files"
        return "queued"

    def finished_after(self, now: float) -> float | None:
        """Elapsed seconds at which the job became terminal; None while it is not."""
        status = self.status(now)
        if status == "cancelled":
            return self.cancelled_after
        return self.ends_after if status in TERMINAL else None

    def events(self, now: float) -> list[Event]:
        """What has happened so far, oldest first."""
        queued, validating, running = self.schedule
        epochs = self.hyperparameters.n_epochs
        planned = [
            Event(0.0, "info", f"Created fine-tuning job: {self.id}"),
            Event(queued, "info", f"Validating training file: {self.training_file}"),
        ]
        if self.failure is not None and not self.failure.while_running:
            planned.append(Event(queued + validating, "error", self.failure.message))
        else:
            start = queued + validating
            planned.append(Event(start, "info", f"Fine-tuning job started: {self.id}"))
            planned += [
                Event(start + running * k / epochs, "info", f"Epoch {k}/{epochs} completed")
                for k in range(1, epochs)
            ]
            if self.failure is not None:
                planned.append(Event(start + running, "error", self.failure.message))
            else:
                planned.append(Event(start + running, "info", "The job has successfully completed"))
        upto = self.elapsed(now)
        if self.cancelled_after is not None and self.cancelled_after <= upto:
            shown = [e for e in planned if e.offset_s < self.cancelled_after]
            return [*shown, Event(self.cancelled_after, "info", "The job was cancelled")]
        return [e for e in planned if e.offset_s <= upto]


@dataclass
class FineTuning:
    """Files, jobs and deleted models of the simulated provider, with counters for tests."""

    files: dict[str, UploadedFile] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)  # in creation order
    deleted_models: set[str] = field(default_factory=set)
    uploads: int = 0
    jobs_created: int = 0
    cancels: int = 0
    models_deleted: int = 0

    def statistics(self) -> dict[str, int]:
        return {
            "uploads": self.uploads,
            "jobs_created": self.jobs_created,
            "cancels": self.cancels,
            "models_deleted": self.models_deleted,
        }

    def add_file(
        self, *, filename: str, purpose: str, content: bytes, now_unix: int
    ) -> UploadedFile:
        uploaded = UploadedFile(
            f"file-{secrets.token_hex(12)}", filename, purpose, content, now_unix
        )
        self.files[uploaded.id] = uploaded
        self.uploads += 1
        return uploaded

    def add_job(self, job: Job) -> None:
        self.jobs[job.id] = job
        self.jobs_created += 1

    def cancel(self, job: Job, now: float) -> bool:
        """Cancel a job that has not ended; False (nothing changed) when it has."""
        if job.status(now) in TERMINAL:
            return False
        job.cancelled_after = job.elapsed(now)
        self.cancels += 1
        return True

    def live_model(self, name: str, now: float) -> Job | None:
        """The succeeded job whose model is `name`, unless that model was deleted."""
        if name in self.deleted_models:
            return None
        for job in self.jobs.values():
            if job.fine_tuned_model == name and job.status(now) == "succeeded":
                return job
        return None

    def delete_model(self, name: str, now: float) -> bool:
        if self.live_model(name, now) is None:
            return False
        self.deleted_models.add(name)
        self.models_deleted += 1
        return True


def new_job_id() -> str:
    return f"ftjob-{secrets.token_hex(12)}"


def dataset_tokens(content: bytes) -> int | str:
    """The tokens of a chat-format JSONL training file (words of every message's content plus
    PER_MESSAGE_TOKENS per message, as chat prompts are counted), or the reason the file is
    malformed."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return "the file is not UTF-8"
    tokens = examples = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            example: Any = msgspec.json.decode(line)
        except msgspec.DecodeError:
            return f"line {number} is not valid JSON"
        messages = example.get("messages") if isinstance(example, dict) else None
        if not isinstance(messages, list) or not messages:
            return f"line {number} has no `messages` list"
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                return f"line {number}: every message needs a string `role`"
            said = message.get("content")
            if said is not None and not isinstance(said, str):
                return f"line {number}: a message `content` must be a string"
            tokens += len((said or "").split()) + PER_MESSAGE_TOKENS
        examples += 1
    if not examples:
        return "the file holds no example"
    return tokens
