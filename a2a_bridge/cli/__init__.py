"""The command line at the top: `a2a-bridge` and its commands (`main`), loading a user's agent (`agent_loading`),
the start banner and the store's preflight, the capture kit's planner and ports. Nothing imports it but
`a2a_bridge.__main__`.

May import: every layer."""
