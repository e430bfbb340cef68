"""The rules a fine-tuning job is made by (docs/decisions.md, "Fine-tuning jobs"). No I/O.

- `model` must name a dated base model: its name (the alias, or the part after `<provider>/`)
  ends in `-YYYY-MM-DD`, a real date (the API recommends pinning it: the date keeps a later
  rotation of the undated name from changing what is trained).
- `suffix`: 1 to 64 characters of letters, digits, `-` and `_` (it becomes part of a model id
  whose fields are separated by `:`).
- Hyperparameters left out, null or "auto" take fixed defaults (n_epochs 3, batch_size 1,
  learning_rate_multiplier 2.0), filled in on the job and sent to the provider as they are, so
  what is reported, trained and billed is the same.
- The fine-tuned model is `ft:<base model as named>:<org id>:<suffix or empty>:<job id's random
  part>`.
- Training costs dataset tokens x n_epochs x the base model's `training_usd_per_mtok` x (1 + the
  plan's fee), in micro-dollars rounded half up once (protocol/billing.charge_micros).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from protocol.billing import charge_micros
from protocol.errors import invalid_request
from protocol.pricing import estimate_tokens

DEFAULT_N_EPOCHS = 3
DEFAULT_BATCH_SIZE = 1
DEFAULT_LEARNING_RATE_MULTIPLIER = 2.0
MAX_SUFFIX_CHARS = 64
# estimated_finish: a fixed queue-and-setup time plus a training rate (decisions.md).
SETUP_S = 300
TOKENS_PER_S = 1000

_DATED = re.compile(r"-(\d{4})-(\d{2})-(\d{2})$")
_SUFFIX = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MILLION = Decimal(1_000_000)
_JOB_PREFIX = "ftjob_"


def check_dated(name: str) -> None:
    """400 (param `model`) unless the model's own name ends in a valid `-YYYY-MM-DD`."""
    own = name.rsplit("/", 1)[-1]
    match = _DATED.search(own)
    valid = False
    if match:
        try:
            date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
            valid = True
        except ValueError:
            valid = False
    if not valid:
        raise invalid_request(
            f"`model` must be a dated base model (e.g. gpt-4o-mini-2024-07-18); {name[:80]!r}"
            " has no -YYYY-MM-DD date suffix.",
            param="model",
            code="invalid_model",
        )


def check_suffix(suffix: str) -> None:
    if not _SUFFIX.fullmatch(suffix):
        raise invalid_request(
            f"`suffix` must be 1 to {MAX_SUFFIX_CHARS} characters of letters, digits, '-' and '_'.",
            param="suffix",
        )


@dataclass(frozen=True, slots=True)
class Effective:
    n_epochs: int
    batch_size: int
    learning_rate_multiplier: Decimal


def effective(
    n_epochs: int | str | None, batch_size: int | str | None, lrm: float | str | None
) -> Effective:
    """The values a job runs with: given ones as they are, the rest the defaults."""
    return Effective(
        n_epochs=n_epochs if isinstance(n_epochs, int) else DEFAULT_N_EPOCHS,
        batch_size=batch_size if isinstance(batch_size, int) else DEFAULT_BATCH_SIZE,
        learning_rate_multiplier=Decimal(repr(lrm))
        if isinstance(lrm, float | int) and not isinstance(lrm, bool)
        else Decimal(repr(DEFAULT_LEARNING_RATE_MULTIPLIER)),
    )


def fine_tuned_model_name(base_model: str, org_id: str, suffix: str | None, job_id: str) -> str:
    return f"ft:{base_model}:{org_id}:{suffix or ''}:{job_id.removeprefix(_JOB_PREFIX)}"


def training_tokens_bound(file_bytes: int) -> int:
    """The most tokens a training file of `file_bytes` can count as (about 4 bytes a token,
    as protocol/pricing.estimate_tokens): what is held at creation, before it is read."""
    return estimate_tokens(file_bytes)


def training_charge(
    dataset_tokens: int, n_epochs: int, usd_per_mtok: Decimal, fee_percent: Decimal
) -> int:
    """Micro-dollars for training `dataset_tokens` for `n_epochs`, the fee included."""
    cost = Decimal(dataset_tokens) * n_epochs * usd_per_mtok / _MILLION
    return charge_micros(cost, fee_percent)


def estimated_finish_s(created_at_s: int, dataset_tokens: int, n_epochs: int) -> int:
    return created_at_s + SETUP_S + -(-dataset_tokens * n_epochs // TOKENS_PER_S)
