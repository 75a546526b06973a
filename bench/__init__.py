"""Benchmarks of a2a-bridge on loopback: a raw asyncio HTTP/1.1 load client and the scripts that drive it."""
