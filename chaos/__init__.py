"""A Jepsen-style nemesis test of replicas on one PostgreSQL database: `python -m chaos.run` (`make chaos`)."""
