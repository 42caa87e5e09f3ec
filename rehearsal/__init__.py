"""The local rehearsal (`python -m rehearsal`); it may import benchmarks/ and infra/, never
the reverse."""
