"""The Provider Keys API (bring-your-own-key): an organization's own key for a provider.

Callers need a management key: a provider key decides where the organization's prompts go and
who pays for them, organization-wide (no secret key may change that, whatever its scopes). A key
is checked with its provider before it is stored, stored sealed (AES-256-GCM), and never
answered: responses carry its last characters only. One key per provider: creating a second
replaces the first (same id). Another organization's key is indistinguishable from a missing one.
A key the provider refused on a request is shown `status: "invalid"` (services/provider_keys.py
stops using it); storing a key again for that provider makes it valid.
"""

from __future__ import annotations

from actors.upstream import Upstreams
from gateway.provider_keys.check import check_with_provider
from gateway.web import Auth, Operation, Request, Response, Routes, json_response
from protocol import errors
from protocol.provider_keys import (
    ProviderKey,
    ProviderKeyCreate,
    ProviderKeyDeleted,
    ProviderKeyList,
    key_hint,
    refusal_reason,
    sealing_context,
    shown_hint,
)
from protocol.timefmt import to_iso
from services.principal import Principal
from services.provider_keys import ProviderKeyResolver
from storage.open import Storage
from storage.provider_keys import ProviderKeyRecord

_AUTH_ERRORS = (401, 403)
_TAG = "Provider keys"


def provider_key_item(record: ProviderKeyRecord) -> ProviderKey:
    return ProviderKey(
        id=record.id,
        provider=record.provider,
        key_hint=shown_hint(record.key_hint),
        created_at=to_iso(record.created_at) or "",
        updated_at=to_iso(record.updated_at) or "",
        last_rejected_at=to_iso(record.last_rejected_at),
        status="valid" if record.invalid_since is None else "invalid",
        invalidated_at=to_iso(record.invalid_since),
        invalid_reason=None
        if record.invalid_since is None
        else refusal_reason(record.invalid_status),
        fallback_to_gateway_key=record.fallback_to_gateway_key,
    )


def _not_found(key_id: str) -> errors.APIError:
    return errors.not_found(
        f"No provider key with id {key_id!r}.",
        code="provider_key_not_found",
        param="provider_key_id",
    )


def _principal(request: Request) -> Principal:
    assert request.principal is not None
    return request.principal


def routes(storage: Storage, resolver: ProviderKeyResolver, upstreams: Upstreams) -> Routes:
    r = Routes()

    @r.operation(
        Operation(
            "POST",
            "/v1/provider_keys",
            "Store the organization's own key for a provider, checked with the provider first"
            " (201; 200 when it replaces the key held for that provider)",
            _TAG,
            request=ProviderKeyCreate,
            response=ProviderKey,
            auth=Auth.MANAGEMENT,
            success_status=201,
            other_success=(200,),  # it replaced the key held for that provider
            errors=(400, *_AUTH_ERRORS, 413, 502, 504),
        )
    )
    async def create_provider_key(request: Request) -> Response:
        principal = _principal(request)
        body = await request.json(ProviderKeyCreate)
        client = upstreams.clients.get(body.provider)
        if client is None:
            known = ", ".join(sorted(upstreams.clients)) or "none"
            raise errors.invalid_request(
                f"Unknown provider {body.provider!r}; configured providers: {known}.",
                param="provider",
                code="unknown_provider",
            )
        await check_with_provider(client, body.api_key)
        org_id = principal.org_id
        sealed = resolver.box.seal(body.api_key, sealing_context(org_id, body.provider))
        record, created = await storage.provider_keys.put(
            org_id,
            body.provider,
            sealed,
            key_hint(body.api_key),
            fallback_to_gateway_key=body.fallback_to_gateway_key,
        )
        # Valid again (if it was marked invalid): forgotten here now, on the other instances
        # with the credential epoch the put moved.
        resolver.forget(org_id, body.provider)
        return json_response(provider_key_item(record), status=201 if created else 200)

    @r.operation(
        Operation(
            "GET",
            "/v1/provider_keys",
            "List the organization's provider keys, by provider",
            _TAG,
            response=ProviderKeyList,
            auth=Auth.MANAGEMENT,
            errors=_AUTH_ERRORS,
        )
    )
    async def list_provider_keys(request: Request) -> Response:
        principal = _principal(request)
        records = await storage.provider_keys.list(principal.org_id)
        items = [provider_key_item(k) for k in records]
        return json_response(ProviderKeyList(data=items, total=len(items)))

    @r.operation(
        Operation(
            "GET",
            "/v1/provider_keys/{provider_key_id}",
            "Retrieve a provider key (its last characters only)",
            _TAG,
            response=ProviderKey,
            auth=Auth.MANAGEMENT,
            errors=(*_AUTH_ERRORS, 404),
        )
    )
    async def get_provider_key(request: Request) -> Response:
        principal = _principal(request)
        provider_key_id = request.path_params["provider_key_id"]
        record = await storage.provider_keys.get(principal.org_id, provider_key_id)
        if record is None:
            raise _not_found(provider_key_id)
        return json_response(provider_key_item(record))

    @r.operation(
        Operation(
            "DELETE",
            "/v1/provider_keys/{provider_key_id}",
            "Delete a provider key: requests to its provider use the gateway's key again",
            _TAG,
            response=ProviderKeyDeleted,
            auth=Auth.MANAGEMENT,
            errors=(*_AUTH_ERRORS, 404),
        )
    )
    async def delete_provider_key(request: Request) -> Response:
        principal = _principal(request)
        provider_key_id = request.path_params["provider_key_id"]
        record = await storage.provider_keys.delete(principal.org_id, provider_key_id)
        if record is None:
            raise _not_found(provider_key_id)
        resolver.forget(principal.org_id, record.provider)
        return json_response(ProviderKeyDeleted(id=provider_key_id, deleted=True))

    return r
