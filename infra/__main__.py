"""The Pulumi program (`main: infra/` in Pulumi.yaml): read config, check, declare, export.

The language host runs this directory with `runpy.run_path`, which puts `infra/` (not the
repository root) on `sys.path`; adding the root imports the `infra` package as the tests
and the toolkit do. Tests run this same file under the SDK's mocks with the stack files.
"""

import sys
from pathlib import Path

import pulumi
from pulumi.runtime import config as runtime_config

if (_ROOT := str(Path(__file__).resolve().parent.parent)) not in sys.path:
    sys.path.insert(0, _ROOT)

from infra import benchmark_components, cluster, components, settings  # noqa: E402


def main() -> None:
    # Read raw, so unknown keys are reported and no secret is read through `Config.get`
    # (which warns about it); the secret keys are the ones the CLI marked.
    raw = dict(runtime_config.CONFIG.get()) or runtime_config.get_config_env()
    secret_keys = frozenset(k for k in raw if runtime_config.is_config_secret(k))
    try:
        stack = settings.parse_settings(raw, pulumi.get_stack(), pulumi.get_project(),
                                        secret_keys)
        live = cluster.observe(stack, raw.get("kubernetes:kubeconfig"),
                               dry_run=pulumi.runtime.is_dry_run(), say=pulumi.log.info)
        if problems := cluster.problems(stack, live):
            raise settings.SettingsError(stack.stack, problems)
    except settings.SettingsError as err:
        # RunError: the CLI prints the message alone, without a traceback.
        raise pulumi.RunError(str(err)) from None
    config = pulumi.Config()
    tokens = {key: config.require_secret(key) for key in stack.secrets.required}
    deployment = components.deploy(stack, tokens, live)
    benchmark_components.deploy_benchmark(stack, deployment, live)
    for name, value in {**components.stack_outputs(stack, deployment),
                        **benchmark_components.stack_outputs(stack)}.items():
        pulumi.export(name, value)


main()
