"""a2a-bridge: an A2A 1.0 agent server on a2a-sdk that keeps every task accounted for."""

import sys

from a2a_bridge.observability import sdk_tracing_from_argv

sdk_tracing_from_argv(sys.argv)
