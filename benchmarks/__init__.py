"""Benchmark toolkit (`python -m benchmarks`): videos, smoke test, sweep, report, collect, plan."""
