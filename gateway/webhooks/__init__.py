"""The Webhooks API: subscriptions, their secrets, test events and the delivery log
(routes.py), the records as answered (views.py), and the check of a subscription's URL
(target.py). Delivery itself is actors/webhooks/."""
