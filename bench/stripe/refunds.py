"""Refunds (by API or from the dashboard) and disputes, and what they do to the charge."""

from __future__ import annotations

from bench.stripe import errors
from bench.stripe.ledger import Ledger
from bench.stripe.params import (
    AUTOMATIC,
    Form,
    Obj,
    Origin,
    check_params,
    integer,
    metadata_update,
    new_id,
    text,
)


class Refunds(Ledger):
    def create_refund(self, form: Form, origin: Origin) -> Obj:
        check_params(
            form,
            {"payment_intent", "charge", "amount", "reason", "metadata", "expand"}
            | {"instructions_email"},
        )
        pi_id, charge_id = text(form, "payment_intent"), text(form, "charge")
        if pi_id and charge_id:
            raise errors.invalid("You can only specify one of payment_intent or charge.", "charge")
        if pi_id:
            pi = self.payment_intent(pi_id, "payment_intent")
            if pi["status"] != "succeeded" or not pi["latest_charge"]:
                raise errors.invalid(
                    f"This PaymentIntent ({pi_id}) does not have a successful charge to refund.",
                    "payment_intent",
                )
            charge = self.charges[pi["latest_charge"]]
        elif charge_id:
            charge = self.charge(charge_id, "charge")
        else:
            raise errors.invalid(
                "One of the following params should be provided for this request: payment_intent "
                "or charge.",
                code="parameter_missing",
            )
        reason = text(form, "reason")
        if reason is not None and reason not in (
            "duplicate",
            "fraudulent",
            "requested_by_customer",
        ):
            raise errors.invalid(f"Invalid reason: {reason[:40]}", "reason")
        amount = integer(form, "amount")
        return self._refund(charge, amount, reason, metadata_update({}, form), origin)

    def _refund(
        self,
        charge: Obj,
        amount: int | None,
        reason: str | None,
        metadata: dict[str, str],
        origin: Origin,
    ) -> Obj:
        if charge["status"] != "succeeded":
            raise errors.invalid(f"Charge {charge['id']} has not succeeded.", "charge")
        left = charge["amount"] - charge["amount_refunded"]
        if left <= 0:
            raise errors.invalid(
                f"Charge {charge['id']} has already been refunded.",
                code="charge_already_refunded",
            )
        if amount is None:
            amount = left
        if amount <= 0:
            raise errors.invalid("Refund amount must be positive.", "amount")
        if amount > left:
            raise errors.invalid(
                f"Refund amount ({amount} {charge['currency']}) is greater than unrefunded "
                f"amount on charge ({left} {charge['currency']})",
                "amount",
                "amount_too_large",
            )
        refund: Obj = {
            "id": new_id("re"),
            "object": "refund",
            "amount": amount,
            "balance_transaction": None,
            "charge": charge["id"],
            "created": self._created(),
            "currency": charge["currency"],
            "destination_details": {"card": {"type": "refund"}, "type": "card"},
            "metadata": metadata,
            "payment_intent": charge["payment_intent"],
            "reason": reason,
            "status": "succeeded",
        }
        self.refunds[refund["id"]] = refund
        charge["amount_refunded"] += amount
        charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
        self.emit("charge.refunded", charge, origin)
        self.emit("refund.created", refund, origin)
        return refund

    def refund_from_dashboard(self, pi_id: str, amount: int | None = None) -> Obj:
        pi = self.payment_intent(pi_id)
        if not pi["latest_charge"]:
            raise errors.invalid(f"PaymentIntent {pi_id} has no charge")
        charge = self.charges[pi["latest_charge"]]
        return self._refund(charge, amount, "requested_by_customer", {}, Origin(new_id("req")))

    def create_dispute(self, pi_id: str) -> Obj:
        pi = self.payment_intent(pi_id)
        charge = self.charges.get(pi["latest_charge"] or "")
        if charge is None or charge["status"] != "succeeded":
            raise errors.invalid(f"PaymentIntent {pi_id} has no successful charge to dispute")
        dispute: Obj = {
            "id": new_id("dp"),
            "object": "dispute",
            "amount": charge["amount"] - charge["amount_refunded"],
            "balance_transactions": [],
            "charge": charge["id"],
            "created": self._created(),
            "currency": charge["currency"],
            "evidence_details": {
                "due_by": self._created() + 7 * 86400,
                "has_evidence": False,
                "past_due": False,
                "submission_count": 0,
            },
            "is_charge_refundable": False,
            "livemode": False,
            "metadata": {},
            "payment_intent": pi_id,
            "reason": "fraudulent",
            "status": "needs_response",
        }
        self.disputes[dispute["id"]] = dispute
        charge["disputed"] = True
        self.emit("charge.dispute.created", dispute, AUTOMATIC)
        return dispute
