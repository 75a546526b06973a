"""Agents written for the bridge's public API (docs/your-agent.md), served from the checkout with
`a2a-bridge serve --agent examples.hello_agent:agent`."""
