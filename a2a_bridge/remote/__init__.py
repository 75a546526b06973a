"""Remote agents fronted by the bridge (`serve --remote`): the agent that forwards each turn to the remote A2A server
(`agent`), its configuration from the remote's card (`config`) and the retry policy of its calls (`faults`). Only
the command line imports it.

May import: the application (`a2a_bridge.app`, `a2a_bridge.agent`), http, tasks, push, store, core."""
