"""The pull request's workflow (.github/workflows/pr.yml) against the project it previews: every
stack previewed and posted, the permission on that job alone, the action's major, no stack
created by a preview, the CRD of the pinned Dynamo release."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.settings import STAND_INS, config_from_files, parse_settings, stack_names
from tests.conftest import REPO_ROOT

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "pr.yml"


def jobs() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]


def step(job: str, name: str) -> dict[str, Any]:
    [found] = [s for s in jobs()[job]["steps"] if name in s.get("name", s.get("uses", ""))]
    return found


def run_step(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A `run:` step as the runner runs it (bash -e)."""
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


def test_the_preview_covers_every_stack_file(tmp_path: Path) -> None:
    """The matrix is what the `stacks` job lists: run its step beside a new stack file."""
    preview, listing = jobs()["preview"], jobs()["stacks"]
    assert "stacks" in preview["needs"]
    assert preview["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.stacks) }}"
    assert listing["outputs"]["stacks"] == "${{ steps.list.outputs.stacks }}"
    for path in REPO_ROOT.glob("Pulumi*.yaml"):
        shutil.copy(path, tmp_path)
    (tmp_path / "Pulumi.new-profile.yaml").write_text("config: {}\n")
    output = tmp_path / "github-output"
    done = run_step(step("stacks", "Every Pulumi.<stack>.yaml")["run"], tmp_path,
                    {"GITHUB_OUTPUT": str(output)})
    assert done.returncode == 0, done.stderr
    [line] = output.read_text().splitlines()
    assert json.loads(line.removeprefix("stacks=")) == sorted(
        [*stack_names(REPO_ROOT), "new-profile"])


def preview_inputs() -> dict[str, Any]:
    return step("preview", "pulumi preview")["with"]


def test_each_preview_is_one_comment_per_stack_edited_in_place_and_creates_no_stack() -> None:
    """pulumi/actions v7 (src/libs/pr.ts at 8e5e406f) finds its earlier comment by a heading
    that names the stack; `upsert` would create a missing stack as a side effect."""
    inputs = preview_inputs()
    assert inputs["command"] == "preview" and "matrix.stack" in inputs["stack-name"]
    assert inputs["comment-on-pr"] is True and inputs["edit-pr-comment"] is True
    assert "upsert" not in inputs


def test_only_the_preview_job_may_write_to_the_pull_request() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow["permissions"] == {"contents": "read"}
    writers = {name for name, job in jobs().items()
               if (job.get("permissions") or {}).get("pull-requests") == "write"}
    assert writers == {"preview"}
    assert jobs()["preview"]["permissions"] == {"contents": "read", "pull-requests": "write"}


def test_every_pulumi_action_is_of_major_v7() -> None:
    uses = [s["uses"] for job in jobs().values() for s in job["steps"]
            if s.get("uses", "").startswith("pulumi/actions@")]
    assert len(uses) == 2 and set(uses) == {"pulumi/actions@v7"}


@pytest.mark.parametrize("missing", [True, False])
def test_a_missing_stack_is_reported_with_the_command_that_creates_it(
        tmp_path: Path, missing: bool) -> None:
    """The step before the preview, with a `pulumi` that answers as the CLI does
    (pulumi/pulumi pkg/backend/backenderr: "no stack named '...' found")."""
    fake = tmp_path / "pulumi"
    fake.write_text("#!/bin/sh\necho \"error: no stack named '$3' found\" >&2\nexit 255\n"
                    if missing else "#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    done = run_step(step("preview", "The stack exists")["run"], REPO_ROOT, {
        "PATH": f"{tmp_path}:{os.environ['PATH']}", "STACK": "acme/new-profile"})
    assert done.returncode == (1 if missing else 0), done.stdout + done.stderr
    if missing:
        assert "::error" in done.stdout and "pulumi stack init acme/new-profile" in done.stdout


def _with_fallbacks(text: str) -> str:
    """The config map as a run without the optional secrets and variables sees it."""
    text = text.replace("${{ secrets.NGC_API_KEY }}", "any-non-empty-value")
    return re.sub(r"\$\{\{ (?:secrets|vars)\.\w+ \|\| '([^']*)' \}\}", r"\1", text)


def test_the_stand_ins_are_the_settings_own() -> None:
    """What the workflow passes without a variable is the stand-in the settings and the
    preflight recognise (never a cluster's storage class to read)."""
    config = json.loads(_with_fallbacks(preview_inputs()["config-map"]))
    for key, stand_in in STAND_INS.items():
        if key != "ngcApiKey":
            assert config[f"cosmos3-routing:{key}"]["value"] == stand_in, key
    assert {k for k, v in config.items() if v["secret"]} == {
        "cosmos3-routing:ngcApiKey", "cosmos3-routing:hfToken"}


@pytest.mark.parametrize("stack", stack_names(REPO_ROOT))
def test_every_stack_previews_with_what_the_workflow_passes(stack: str) -> None:
    config = json.loads(_with_fallbacks(preview_inputs()["config-map"]))
    project, raw = config_from_files(REPO_ROOT, stack)
    raw.update({key: item["value"] for key, item in config.items()})
    parse_settings(raw, stack, project,
                   frozenset(key for key, item in config.items() if item["secret"]))


def test_the_graph_is_validated_against_the_crd_of_the_pinned_dynamo_release() -> None:
    [version] = re.findall(r"^DYNAMO_VERSION=(\S+)$",
                           (REPO_ROOT / "scripts" / "setup.sh").read_text(), re.M)
    url = yaml.safe_load(WORKFLOW.read_text())["env"]["DGD_CRD_URL"]
    assert url == ("https://raw.githubusercontent.com/ai-dynamo/dynamo/"
                   f"v{version}/deploy/operator/config/crd/bases/"
                   "nvidia.com_dynamographdeployments.yaml")
