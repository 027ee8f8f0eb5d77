"""Test support: real broker processes on free loopback ports, and waiting with deadlines."""
