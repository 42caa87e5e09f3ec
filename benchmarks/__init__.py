"""Benchmark toolkit: synthetic videos, AIPerf dataset, smoke test, sweep, report, rehearsal."""
