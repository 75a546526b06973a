"""`make tck`: the official A2A TCK (../shared/a2a-tck) against the conformance agent on every binding we serve."""
