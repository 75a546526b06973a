"""The store: where tasks and their claims are kept. The ledger's contract (`ledger`) and its memory, SQLite and
PostgreSQL implementations (`sql_ledger`, `ledger_tables`, `ledger_batch`, `group_commit`, `sql_deliveries`,
`pg_session`), the SDK's task stores beside them (`sql_task_store`, `memory_task_store`, `stored_tasks`), what the
stores can hold (`storable`, `proto_json`), how their faults read (`store_faults`), how they are opened (`stores`), and the operator's reads across every
task (`ledger_views`).

May import: core."""
