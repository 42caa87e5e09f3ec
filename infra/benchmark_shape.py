"""Moved to `infra.names`; kept until the modules outside infra27 import it there."""

from infra.names import *  # noqa: F403
