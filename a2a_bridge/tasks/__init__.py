"""The turn engine: one agent's task host (`task_host`), the turns it runs and how their writes reach the store
(`turns`, `turn_execution`, `task_writer`, `kept_writes`, `live_tasks`), cancels, sweeps, idempotent retries and
delegation, and how replicas on one database share the work (`replicas`, `event_log`, `sessions`).

May import: push, store, core."""
