"""Stripe's REST routes over the simulated account: which call a method and path make, list
envelopes with cursor pagination, and `expand[]`. Pure: a request's parsed form in, a status
and a JSON object out (errors raised as StripeFailure)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from bench.stripe import errors
from bench.stripe.params import check_params, integer, text
from bench.stripe.store import Account, Form, Obj, Origin

Handler = Callable[[Account, list[str], Form, Origin], Obj]

LIST_PARAMS = {"limit", "starting_after", "ending_before", "expand"}


def _list(items: list[Obj], form: Form, url: str, allowed: set[str], account: Account) -> Obj:
    """Stripe's list envelope over `items` (newest first), paged by limit and the cursors."""
    check_params(form, LIST_PARAMS | allowed)
    limit = integer(form, "limit")
    if limit is None:
        limit = 10
    if not 1 <= limit <= 100:
        raise errors.invalid("Invalid limit: must be between 1 and 100", "limit")
    after, before = text(form, "starting_after"), text(form, "ending_before")
    ids = [item["id"] for item in items]
    if after is not None:
        if after not in ids:
            raise errors.missing("object", after, "starting_after")
        start = ids.index(after) + 1
        page = items[start : start + limit]
        has_more = start + limit < len(items)
    elif before is not None:
        if before not in ids:
            raise errors.missing("object", before, "ending_before")
        end = ids.index(before)
        page = items[max(0, end - limit) : end]
        has_more = end - limit > 0
    else:
        page, has_more = items[:limit], len(items) > limit
    expand = [e.removeprefix("data.") for e in _expansions(form)]
    data = [_expanded(account, item, expand) for item in page]
    return {"object": "list", "data": data, "has_more": has_more, "url": url}


def _expansions(form: Form) -> list[str]:
    value = form.get("expand")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.invalid("Invalid array", "expand")
    return [str(v) for v in value]


_KINDS = {
    "cus": "customers",
    "pm": "payment_methods",
    "pi": "payment_intents",
    "ch": "charges",
    "re": "refunds",
    "dp": "disputes",
    "seti": "setup_intents",
}


def _lookup(account: Account, object_id: str) -> Obj | None:
    table = _KINDS.get(object_id.split("_", 1)[0])
    if table is None:
        return None
    found: Obj | None = getattr(account, table).get(object_id)
    return found


def _expanded(account: Account, obj: Obj, paths: list[str]) -> Obj:
    """A copy of `obj` with each dotted path's id replaced by its object (400 if it is not
    an expandable field, as Stripe)."""
    result = copy.deepcopy(obj)
    for path in paths:
        parts = path.split(".")
        if len(parts) > 4:
            raise errors.invalid(f"You cannot expand more than 4 levels of a property: {path}")
        holder: Any = result
        for part in parts[:-1]:
            holder = holder.get(part) if isinstance(holder, dict) else None
        last = parts[-1]
        if not isinstance(holder, dict) or last not in holder:
            raise errors.invalid(
                f"This property cannot be expanded ({path}).", "expand", "parameter_invalid"
            )
        value = holder[last]
        if value is None or isinstance(value, dict):
            continue
        target = _lookup(account, value) if isinstance(value, str) else None
        if target is None:
            raise errors.invalid(
                f"This property cannot be expanded ({path}).", "expand", "parameter_invalid"
            )
        holder[last] = copy.deepcopy(target)
    return result


def _one(getter: Callable[[Account, str], Obj]) -> Handler:
    def handle(account: Account, ids: list[str], form: Form, origin: Origin) -> Obj:
        check_params(form, {"expand"})
        return getter(account, ids[0])

    return handle


def _customer_pms(account: Account, ids: list[str], form: Form, origin: Origin) -> Obj:
    items = account.customer_payment_methods(ids[0], form)
    url = f"/v1/customers/{ids[0]}/payment_methods"
    return _list(items, form, url, {"type", "allow_redisplay"}, account)


def _list_pis(account: Account, ids: list[str], form: Form, origin: Origin) -> Obj:
    items = account.list_payment_intents(form)
    return _list(items, form, "/v1/payment_intents", {"customer", "created"}, account)


def _list_refunds(account: Account, ids: list[str], form: Form, origin: Origin) -> Obj:
    """GET /v1/refunds: newest first, by `charge` or `payment_intent` when given."""
    found = list(account.refunds.values())
    for name in ("charge", "payment_intent"):
        wanted = text(form, name)
        if wanted is not None:
            found = [r for r in found if r.get(name) == wanted]
    found.reverse()
    return _list(found, form, "/v1/refunds", {"charge", "payment_intent"}, account)


ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    ("POST", re.compile(r"/v1/customers"), lambda a, i, f, o: a.create_customer(f, o)),
    ("GET", re.compile(r"/v1/customers/([^/]+)"), _one(lambda a, i: a.customer(i))),
    (
        "POST",
        re.compile(r"/v1/customers/([^/]+)"),
        lambda a, i, f, o: a.update_customer(i[0], f, o),
    ),
    ("GET", re.compile(r"/v1/customers/([^/]+)/payment_methods"), _customer_pms),
    ("GET", re.compile(r"/v1/payment_methods/([^/]+)"), _one(lambda a, i: a.payment_method(i))),
    (
        "POST",
        re.compile(r"/v1/payment_methods/([^/]+)/attach"),
        lambda a, i, f, o: a.attach(i[0], f, o),
    ),
    (
        "POST",
        re.compile(r"/v1/payment_methods/([^/]+)/detach"),
        lambda a, i, f, o: a.detach(i[0], f, o),
    ),
    ("POST", re.compile(r"/v1/payment_intents"), lambda a, i, f, o: a.create_payment_intent(f, o)),
    ("GET", re.compile(r"/v1/payment_intents"), _list_pis),
    ("GET", re.compile(r"/v1/payment_intents/([^/]+)"), _one(lambda a, i: a.payment_intent(i))),
    (
        "POST",
        re.compile(r"/v1/payment_intents/([^/]+)/confirm"),
        lambda a, i, f, o: a.confirm_payment_intent(i[0], f, o),
    ),
    ("POST", re.compile(r"/v1/refunds"), lambda a, i, f, o: a.create_refund(f, o)),
    ("GET", re.compile(r"/v1/refunds"), _list_refunds),
    ("GET", re.compile(r"/v1/refunds/([^/]+)"), _one(lambda a, i: a.refund(i))),
    ("GET", re.compile(r"/v1/charges/([^/]+)"), _one(lambda a, i: a.charge(i))),
    ("POST", re.compile(r"/v1/setup_intents"), lambda a, i, f, o: a.create_setup_intent(f, o)),
    ("GET", re.compile(r"/v1/setup_intents/([^/]+)"), _one(lambda a, i: a.setup_intent(i))),
]


def handle(account: Account, method: str, path: str, form: Form, origin: Origin) -> Obj:
    """The JSON object a successful call answers; raises StripeFailure."""
    for route_method, pattern, handler in ROUTES:
        match = pattern.fullmatch(path)
        if match is not None and route_method == method:
            obj = handler(account, list(match.groups()), form, origin)
            if obj.get("object") == "list":
                return obj
            return _expanded(account, obj, _expansions(form))
    raise errors.unrecognized_url(method, path)
