"""Stack config the Pulumi CLI itself would refuse before the program runs.

The SDK's mocks skip the CLI's config checks, so these tests apply them (with
`infra.stack_files.cli_config_problems`, the CLI's rules and wording) to every shipped stack
file and to every `pulumi config set` the README tells users to run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.stack_files import (
    StackFilesError,
    cli_config_problems,
    config_from_files,
    stack_names,
)
from tests.conftest import REPO_ROOT
from tests.support_pulumi import project_file

SHIPPED_STACKS = stack_names(REPO_ROOT)
CONFIG_SET = re.compile(r"pulumi config set ([^`&#|\n]+)")


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_shipped_stack_file_passes_the_clis_config_checks(stack: str) -> None:
    values = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    assert cli_config_problems(project_file(), stack, values) == []


def _project(tmp_path: Path, config: dict[str, Any], stack_values: dict[str, Any]) -> Path:
    (tmp_path / "Pulumi.yaml").write_text(yaml.safe_dump(
        {"name": "p", "runtime": "python", "config": config}))
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": stack_values}))
    return tmp_path


def test_a_typed_key_without_default_must_be_set_on_every_stack(tmp_path: Path) -> None:
    root = _project(tmp_path, {"token": {"type": "string"}, "size": {"type": "string",
                                                                      "default": "1Gi"}}, {})
    with pytest.raises(StackFilesError, match="Stack 'dev' is missing configuration "
                                              "value\\(s\\) 'token'"):
        config_from_files(root, "dev")


def test_a_list_set_as_one_string_is_refused_as_the_cli_does(tmp_path: Path) -> None:
    spec = {"levels": {"type": "array", "items": {"type": "integer"}, "default": [1]}}
    root = _project(tmp_path, spec, {"p:levels": "[1, 4, 16]"})
    with pytest.raises(StackFilesError) as err:
        config_from_files(root, "dev")
    assert "configuration key 'levels' must be of type 'array<integer>'" in str(err.value)
    assert "pulumi config set --path 'levels[0]'" in str(err.value)
    root = _project(tmp_path, spec, {"p:levels": [1, 4, 16]})
    assert config_from_files(root, "dev")[1]["p:levels"] == "[1, 4, 16]"


def test_scalars_are_checked_against_their_declared_type(tmp_path: Path) -> None:
    spec = {"count": {"type": "integer", "default": 1}, "on": {"type": "boolean",
                                                             "default": True}}
    assert cli_config_problems({"name": "p", "config": spec}, "dev",
                               {"p:count": "8", "p:on": "false"}) == []
    problems = cli_config_problems({"name": "p", "config": spec}, "dev",
                                   {"p:count": "eight", "p:on": "yes"})
    assert problems == ["Stack 'dev' with configuration key 'count' must be of type 'integer'",
                        "Stack 'dev' with configuration key 'on' must be of type 'boolean'"]


def test_a_key_declared_secret_must_be_stored_encrypted(tmp_path: Path) -> None:
    spec = {"key": {"type": "string", "secret": True}}
    assert cli_config_problems({"name": "p", "config": spec}, "dev",
                               {"p:key": {"secure": "v1:abc"}}) == []
    (problem,) = cli_config_problems({"name": "p", "config": spec}, "dev", {"p:key": "plain"})
    assert "must be encrypted as it's secret" in problem


def _config_set(values: dict[str, Any], args: list[str]) -> None:
    """`pulumi config set` as the CLI stores it: a top-level value is always a string;
    `--path 'k[i]' v` sets one list item (true/false and integers typed), in order."""
    flags = {a for a in args if a.startswith("--")}
    key, *value = [a for a in args if not a.startswith("--")]
    if "--secret" in flags:
        values[key] = {"secure": "ciphertext"}
        return
    (text,) = value
    if "--path" not in flags:
        values[key] = text
        return
    name, index = re.fullmatch(r"(\w+)\[(\d+)\]", key).groups()
    items = values.setdefault(name, [])
    assert int(index) <= len(items), f"{key}: index past the end of the stack's list"
    typed: Any = {"true": True, "false": False}.get(text, int(text) if text.isdigit() else text)
    items[int(index):int(index) + 1] = [typed]


def _readme_config_lines() -> list[tuple[str, list[list[str]]]]:
    """Each README line that shows `pulumi config set`, with the commands on it."""
    found = []
    for line in (REPO_ROOT / "README.md").read_text().splitlines():
        commands = [shlex.split(m.group(1)) for m in CONFIG_SET.finditer(line)]
        # Project keys only: not `kubernetes:context`, not the `<key> <value>` pattern.
        commands = [c for c in commands
                    if not re.match(r"[<\w-]+:|<", next(a for a in c if a[:2] != "--"))]
        if commands:
            found.append((line, commands))
    return found


def test_every_readme_config_command_yields_config_the_cli_accepts() -> None:
    """Each line on its own (they are alternatives), applied to a stack with no config."""
    project = project_file()
    lines = _readme_config_lines()
    assert len(lines) >= 10
    for line, commands in lines:
        values: dict[str, Any] = {}
        for args in commands:
            _config_set(values, args)
        assert set(values) <= set(project["config"]), line
        assert cli_config_problems(project, "readme", values) == [], line
