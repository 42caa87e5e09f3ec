"""`python -m rehearsal` (what `./run.sh` runs): the CLI is rehearse.main."""

import sys

from rehearsal.rehearse import main

if __name__ == "__main__":
    sys.exit(main())
