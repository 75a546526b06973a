"""The three sample agents of the A2A 101 capture kit: test-runner, code-reviewer and deployer."""
