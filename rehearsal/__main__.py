"""Local rehearsal (`./run.sh`): for each stack, a real dynamo.frontend with the stack's
routing flags and dynamo.mocker with its worker count, on 127.0.0.1; the cluster's adaptive
AIPerf sweep (scaled down), profiles side by side; worker attribution per video; the
comparison report beside the seed's table. Needs no cluster and no GPU."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from benchmarks.sweep import SweepError
from infra.names import InputError
from rehearsal.local_dynamo import LocalDynamoError
from rehearsal.rehearse import Rehearsal, RehearsalConfig


def build_parser() -> argparse.ArgumentParser:
    """RehearsalConfig's options, each named (`dest`) and defaulted as its field; an option
    left unset whose default is None keeps the field's None."""
    p = argparse.ArgumentParser(
        prog="python -m rehearsal", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=__doc__)
    for f in fields(RehearsalConfig):
        if "flag" in f.metadata:
            kwargs = dict(f.metadata)
            default = argparse.SUPPRESS if f.default is None else f.default
            p.add_argument(kwargs.pop("flag"), dest=f.name, default=default, **kwargs)
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    config = RehearsalConfig(**{**args, "profiles": tuple(args["profiles"]),
                                "concurrencies": tuple(args["concurrencies"])})
    rehearsal = Rehearsal(config, say=lambda line: print(line, flush=True))
    try:
        rehearsal.run()
        return 0
    except InputError as exc:
        print(f"rehearse: error: {exc}", file=sys.stderr)
        return 2
    except (LocalDynamoError, SweepError) as exc:
        code, what = 1, f"error: {exc}\nEvery process the rehearsal started was stopped"
    except KeyboardInterrupt:
        code, what = 130, "interrupted; every process it started was stopped"
    print(f"rehearse: {what}; rerun with --run-id {rehearsal.run_dir.name} to resume "
          "(finished levels are kept).", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
