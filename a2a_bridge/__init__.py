"""a2a-bridge: an A2A 1.0 agent server on a2a-sdk that keeps every task accounted for."""

import os

os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")
