"""The Pulumi program (`main: infra/` in Pulumi.yaml): read config, validate, declare, export.

The Python language host runs this directory with `runpy.run_path`, which puts `infra/`
(not the repository root) on `sys.path`; adding the root lets the program import the
`infra` package like the tests and the benchmark toolkit do. Tests run this same file
under the SDK's mocks with the real stack files.
"""

import importlib
import sys
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

cluster = importlib.import_module("infra.cluster")
components = importlib.import_module("infra.components")
benchmark_components = importlib.import_module("infra.benchmark_components")
settings_module = importlib.import_module("infra.settings")


def cli_config() -> tuple[dict[str, Any], frozenset[str]]:
    """All config the CLI handed this run (Pulumi.yaml defaults + stack file) and which
    keys it marked secret. Read raw so unknown keys can be reported, and so the secret key
    is not read through `Config.get` (which warns about reading a secret)."""
    raw = dict(runtime_config.CONFIG.get()) or runtime_config.get_config_env()
    secret = frozenset(k for k in raw if runtime_config.is_config_secret(k))
    return raw, secret


def main() -> None:
    raw, secret_keys = cli_config()
    try:
        settings = settings_module.parse_settings(
            raw, pulumi.get_stack(), pulumi.get_project(), secret_keys
        )
        live = cluster.observe(settings, raw.get("kubernetes:kubeconfig"),
                               dry_run=pulumi.runtime.is_dry_run())
        problems = cluster.problems(settings, live)
        if problems:
            raise settings_module.SettingsError(settings.stack, problems)
    except settings_module.SettingsError as err:
        # RunError: the CLI prints the message alone, without a traceback.
        raise pulumi.RunError(str(err)) from None
    config = pulumi.Config()
    tokens = {key: config.require_secret(key) for key in settings.secrets.required}
    deployment = components.deploy(settings, tokens, live)
    benchmark_components.deploy_benchmark(settings, deployment, live)
    outputs = {
        **components.stack_outputs(settings, deployment),
        **benchmark_components.stack_outputs(settings),
    }
    for name, value in outputs.items():
        pulumi.export(name, value)


main()
