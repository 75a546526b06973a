"""The capture kit's fixed addresses."""

KIT_PORTS = {"test-runner": 41241, "code-reviewer": 41242, "deployer": 41243, "conformance": 9999}
"""Each agent's own port under --kit-ports: the kit's three, and the TCK's default SUT port for conformance."""
