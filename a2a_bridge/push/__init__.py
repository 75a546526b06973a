"""Push notifications: the outbox that delivers each task's events to its webhooks at least once, in order, across
restarts and replicas (`outbox`), the event log's bodies as it reads them (`logged_events`), the config rows it adds
(`config_rows`), and the webhook policy and poster on the wire (`webhooks`, `webhook_wire`, `webhook_connection`).

May import: store, core."""
