"""Creating a job: the checks a body passes (docs/fine_tuning.md, "Creating a job"), then the
job, its first event and the training hold written in one transaction.

The hold is the most the job can cost: the training file's bytes as tokens (about 4 bytes a
token, an upper bound of what our validation counts later) x n_epochs x the base model's
`training_usd_per_mtok` x (1 + the plan's fee). It is checked against what the organization
can spend and against the calling key's daily and monthly budgets, as any spend is (the
accountant: 402 `insufficient_credits` or `budget_exceeded`, which writes `budget.exhausted`),
then written to the ledger and the key's spend with the job, so it survives restarts; the end
of the job settles or releases it (storage/fine_tuning.py), giving back to the key's spend what
was not charged. With the organization's own provider key nothing is held or charged (the
provider bills it).
"""

from __future__ import annotations

import secrets

from actors.accountant import BudgetExceeded, InsufficientCredits
from gateway.fine_tuning.deps import FineTuningDeps
from gateway.inference.model_registry import ResolvedModel, require_allowed
from gateway.provider_keys.gateway_key import require_gateway_key
from protocol import errors
from protocol.billing import KeyBudget, fee_percent, period_name
from protocol.budget_refusal import budget_exceeded_message
from protocol.fine_tuning.api import JobCreate
from protocol.fine_tuning.provider import QUEUED
from protocol.fine_tuning.rules import (
    check_dated,
    effective,
    estimated_finish_s,
    training_charge,
    training_tokens_bound,
)
from protocol.ids import new_id
from protocol.money import format_usd
from protocol.timefmt import to_iso
from services.principal import Principal
from storage.files import FileRecord
from storage.fine_tuning import HELD, NO_BILLING, JobRecord, Note

FINE_TUNE = "fine-tune"
CAPABILITY = "fine_tuning"
_US = 1_000_000


def _model(deps: FineTuningDeps, name: str, principal: Principal) -> ResolvedModel:
    check_dated(name)
    try:
        model = deps.registry.resolve(name)
    except errors.APIError:
        raise errors.invalid_request(
            f"The model {name[:80]!r} is not served by this gateway.",
            param="model",
            code="model_not_found",
        ) from None
    if principal.key is not None:  # the base model is used: the key's allow-list applies
        require_allowed(model, principal.key.allowed_models)
    provider = model.provider
    supports = provider.supports  # None: not restricted (the config's meaning)
    if provider.kind != "openai" or (supports is not None and CAPABILITY not in supports):
        raise errors.invalid_request(
            f"The model {name[:80]!r} cannot be fine-tuned here: its provider"
            f" {provider.name!r} does not offer fine-tuning through an OpenAI-compatible API.",
            param="model",
            code="unsupported_model",
        )
    return model


async def _file(
    deps: FineTuningDeps, org_id: str, file_id: str, param: str, now: int
) -> FileRecord:
    record = await deps.files.repo.get(org_id, file_id, now=now)
    if record is None or record.purpose != FINE_TUNE:
        raise errors.invalid_request(
            f"`{param}` must be the id of one of your files with purpose fine-tune;"
            f" {file_id[:80]!r} is not.",
            param=param,
            code="invalid_file",
        )
    return record


async def create_job(deps: FineTuningDeps, principal: Principal, body: JobCreate) -> JobRecord:
    org_id = principal.org_id
    model = _model(deps, body.model, principal)
    now = deps.clock.now_us()
    training = await _file(deps, org_id, body.training_file, "training_file", now)
    if body.validation_file is not None:
        await _file(deps, org_id, body.validation_file, "validation_file", now)
    provider = model.provider.name
    byok = await deps.provider_keys.lookup(org_id, provider) is not None
    if not byok:
        require_gateway_key(model.provider)
    price = None if model.price is None else model.price.training_usd_per_mtok
    if price is None and not byok and deps.billing:
        raise errors.invalid_request(
            f"No training price is configured for the model {body.model[:80]!r}; add"
            " training_usd_per_mtok to its [[models]] entry.",
            param="model",
            code="model_price_unknown",
        )
    hp = body.hyperparameters
    values = effective(
        hp.n_epochs if hp else None,
        hp.batch_size if hp else None,
        hp.learning_rate_multiplier if hp else None,
    )
    plan = await deps.accountant.plan_of(org_id)
    fee = fee_percent(plan, byok=byok)
    bound = training_tokens_bound(training.bytes)
    hold = 0
    if deps.billing and not byok and price is not None:
        hold = training_charge(bound, values.n_epochs, price, fee)
    job_id = new_id("ftjob")
    job = JobRecord(
        id=job_id,
        org_id=org_id,
        model=body.model,
        provider=provider,
        upstream_model=model.upstream,
        training_file=training.id,
        validation_file=body.validation_file,
        n_epochs=values.n_epochs,
        batch_size=values.batch_size,
        learning_rate_multiplier=values.learning_rate_multiplier,
        suffix=body.suffix,
        seed=body.seed if body.seed is not None else secrets.randbelow(2_147_483_648),
        status=QUEUED,
        byok=byok,
        training_usd_per_mtok=price,
        fee_percent=fee,
        hold_micros=hold,
        billing=HELD if hold > 0 else NO_BILLING,
        estimated_finish=estimated_finish_s(now // _US, bound, values.n_epochs) * _US,
        created_at=now,
        updated_at=now,
        key_id=principal.key_id,
    )
    note = Note(f"Created fine-tuning job: {job_id}")
    description = f"fine-tuning job {job_id}: training hold ({body.model[:80]})"
    if hold == 0:
        await deps.jobs.create(job, note, description=description)
    else:
        await _create_held(deps, job, note, description, _budget(principal))
    deps.wake_watcher()
    return job


def _budget(principal: Principal) -> KeyBudget | None:
    """The calling secret key's caps, as inference checks them (None: it has none)."""
    key = principal.key
    if key is None or (key.daily_budget_micros is None and key.monthly_budget_micros is None):
        return None
    return KeyBudget(key.id, key.name, key.daily_budget_micros, key.monthly_budget_micros)


async def _create_held(
    deps: FineTuningDeps, job: JobRecord, note: Note, description: str, budget: KeyBudget | None
) -> None:
    try:
        reservation = await deps.accountant.reserve(job.org_id, job.hold_micros, budget)
    except BudgetExceeded as exc:
        await deps.accountant.note_exhausted(job.org_id, exc)
        raise errors.payment_required(
            budget_exceeded_message(
                period=period_name(exc.period.label),
                cap=exc.cap,
                committed=exc.committed,
                held=exc.held,
                estimate=job.hold_micros,
                subject="the training hold",
                resets_at=to_iso(exc.period.end_us) or "",
            ),
            code="budget_exceeded",
        ) from None
    except InsufficientCredits as exc:
        available = format_usd(max(exc.available_micros, 0))
        raise errors.payment_required(
            f"The organization's credit balance ({available} available) cannot cover the"
            f" training hold of {format_usd(job.hold_micros)}; top up with"
            " POST /v1/credits/topup.",
            code="insufficient_credits",
        ) from None
    try:
        await deps.jobs.create(job, note, description=description, budget=budget)
        # Before the reservation is released: the key's spend must count the hold first, so
        # that no instant has neither (with Redis the release applies at the next flush).
        await deps.balance_changed(job, -job.hold_micros)
    finally:
        deps.accountant.settle(reservation, None)  # the ledger row holds it from here
