"""Operations, beside the request path: `/metrics`, the operator console (`console_app` and its static files) and
the operator's commands (`operator_cli`). Only the application's assembly and the command line import it.

May import: http, tasks, push, store, core."""
