"""The core: what every layer shares and nothing else. The state tables of the three views of a task and their pure
projections (`states`, `claims`, `task_status`, `task_events`), principals and errors (`auth`, `errors`), the
clock, ids, the security configuration, the command line's value checks and the log fields of a task.

May import: nothing of a2a_bridge's layers (the standard library, the SDK's types, third-party libraries)."""
