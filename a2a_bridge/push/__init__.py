"""Push notifications: the outbox that delivers each task's events to its webhooks at least once, in order, across
restarts and replicas (`outbox`), and the webhook policy and poster on the wire (`webhooks`).

May import: store, core."""
