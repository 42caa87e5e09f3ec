"""The Pulumi program and its building blocks; only `__main__` imports Pulumi, so the toolkit
and the rehearsal read the same names and routing flags."""
