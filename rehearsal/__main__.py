"""`python -m rehearsal` (what `./run.sh` runs): the CLI is rehearse.main."""

from rehearsal.rehearse import main

if __name__ == "__main__":
    raise SystemExit(main())
