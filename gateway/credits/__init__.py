"""Credits and billing: the account, top-ups (topups.py: charged, credited and completed, or
undone, whatever the client does), transactions, the subscription (routes.py), and the payment
processors (payments.py)."""
