"""Helpers shared by the tests and benchmarks (see tests/README.md)."""
