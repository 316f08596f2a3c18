"""stanflow beside a user's own CmdStan that lacks stanflow's extensions.

With ``$CMDSTAN`` naming a CmdStan-shaped installation (tests/plain_cmdstan.py),
cmdstanpy work uses it, and what needs stanflow's driver (resumable ADVI, batch
run sets) or sources (model libraries) uses stanflow's own installation: every
workflow runs in quick mode, in a fresh process as a user would run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from plain_cmdstan import make_plain_cmdstan

from stanflow.toolchain import installer
from stanflow.workflows import list_workflows

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def plain(cmdstan, stanflow_home) -> dict[str, str]:
    """The environment of a process whose active CmdStan is the plain one."""
    real = installer.install()
    where = make_plain_cmdstan(real, stanflow_home / "tests" / f"plain-cmdstan-{real.name}")
    return {**os.environ, "CMDSTAN": str(where)}


def run_python(code: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_plain_cmdstan_is_taken_for_the_users_and_lacks_the_extensions(plain):
    out = run_python(
        """
        import json
        from stanflow import toolchain
        from stanflow.advi import supports_checkpoints
        from stanflow.models import compile_model, program_path
        from stanflow.runs.batch import supports_batch

        source = program_path("models/eight_schools_noncentered")
        active = compile_model(source)
        own = compile_model(source, driver="stanflow")
        print(json.dumps({
            "info": toolchain.info(),
            "active": [supports_batch(active.exe_file), supports_checkpoints(active.exe_file)],
            "own": [supports_batch(own.exe_file), supports_checkpoints(own.exe_file)],
        }))
        """,
        plain,
    )
    facts = json.loads(out.strip().splitlines()[-1])
    assert facts["info"]["kind"] == "cmdstan"
    assert facts["info"]["path"] == plain["CMDSTAN"]
    uses = facts["info"]["uses"]
    assert uses["cmdstanpy (sample, optimize, variational, ...)"] == plain["CMDSTAN"]
    assert uses["model libraries (in-process evaluation)"] == str(installer.install())
    assert facts["active"] == [False, False]
    assert facts["own"] == [True, True]


@pytest.mark.parametrize("name", [name for name, _ in list_workflows()])
def test_every_workflow_runs_quick_beside_a_plain_cmdstan(plain, name, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "stanflow", "run", name, "--quick", "--out", str(tmp_path)],
        env=plain, capture_output=True, text=True, timeout=1500, check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "summary.json").is_file()
