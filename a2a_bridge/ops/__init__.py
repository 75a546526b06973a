"""Operations, beside the request path: `/metrics` (with `minute_ring`, the last hour kept for the console), the
operator console (`console_app` and its static files, its overview `console_overview`, a task's `timeline`) and the
operator's commands (`operator_cli`). Only the application's assembly and the command line import it.

May import: http, tasks, push, store, core."""
