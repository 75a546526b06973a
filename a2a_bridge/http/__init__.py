"""The edge: everything between a request's bytes and the task host. The ASGI guards in front (`request_guard`,
`limits`, `read_timeouts`, `shutdown`, `media_type`, `card_caching`, `agent_mounts`), the three bindings (the
SDK's routes, the direct path `direct_rpc` with `jsonrpc` and `json_bodies`, `grpc_binding`), the SDK's request
handler as the bridge completes it (`handler`, `extensions`), the bridge's own endpoints (`bridge_routes`,
`webhook_routes`, and the operator's reasons for acting, `operator_reasons`), and errors as each binding writes them (`error_codes`, `rest_errors`, `refusal_logs`).

May import: tasks, push, store, core."""
