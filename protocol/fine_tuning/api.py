"""The Fine-tuning API's wire types: the create body (validated on decode) and the job, list and
event views. The same structs describe the routes in /openapi.json."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from protocol.fine_tuning.rules import check_suffix
from protocol.labels import Label

MAX_ID_CHARS = 128
Auto = Literal["auto"]
FileId = Annotated[Label, Meta(min_length=1, max_length=MAX_ID_CHARS)]
ModelName = Annotated[Label, Meta(min_length=1, max_length=256)]
Epochs = Annotated[int, Meta(ge=1, le=50)]
BatchSize = Annotated[int, Meta(ge=1, le=256)]
LearningRate = Annotated[float, Meta(gt=0, le=10)]
Seed = Annotated[int, Meta(ge=0, le=2_147_483_647)]


class HyperparametersIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Omitted, null or "auto": the gateway's default (rules.py), filled in on the job."""

    n_epochs: Epochs | Auto | None = None
    batch_size: BatchSize | Auto | None = None
    learning_rate_multiplier: LearningRate | Auto | None = None


class JobCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    model: ModelName
    training_file: FileId
    validation_file: FileId | None = None
    hyperparameters: HyperparametersIn | None = None
    suffix: str | None = None
    seed: Seed | None = None

    def __post_init__(self) -> None:
        if self.suffix is not None:
            check_suffix(self.suffix)


class JobCancel(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The cancel body: none is needed (an empty object is accepted)."""


class Hyperparameters(msgspec.Struct, kw_only=True):
    n_epochs: int
    batch_size: int
    learning_rate_multiplier: float


class JobError(msgspec.Struct, kw_only=True):
    code: str
    message: str
    param: str | None


class Job(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["fine_tuning.job"] = "fine_tuning.job"
    model: str
    training_file: str
    validation_file: str | None
    status: str
    hyperparameters: Hyperparameters
    fine_tuned_model: str | None
    created_at: int
    estimated_finish: int | None
    finished_at: int | None
    trained_tokens: int | None
    suffix: str | None
    seed: int
    error: JobError | None
    organization_id: str
    result_files: list[str] = msgspec.field(default_factory=list)


class JobList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[Job]
    has_more: bool


class JobEvent(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["fine_tuning.job.event"] = "fine_tuning.job.event"
    created_at: int
    level: str
    message: str
    type: Literal["message"] = "message"
    data: dict[str, Any] | None = None


class JobEventList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[JobEvent]
    has_more: bool
