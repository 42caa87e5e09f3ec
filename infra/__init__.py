"""Cosmos3 Super Reasoner on Dynamo: the Pulumi program and its pure building blocks.

Modules here other than `__main__` and `components` import no Pulumi, so the benchmark
toolkit and the local rehearsal can read the same names and routing flags.
"""
