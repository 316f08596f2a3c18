"""The plan of a run set: what every run does, written once into the run folder.

``plan.json`` holds the executable, the root seed and, per run, its method,
checked arguments, seed, chains, threads and the names of its data and init
files. Data and inits are written under ``inputs/`` as Stan JSON named by the
sha256 of their content, so replicates sharing data share one file and a
rewritten file is byte-identical. Everything a resume needs is in the folder;
the model object and the user's data are not needed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cmdstanpy

from stanflow.atomic import write_atomic
from stanflow.runs.seeds import run_seed
from stanflow.runs.spec import CheckedRun

PLAN_FILE = "plan.json"
INPUTS_DIR = "inputs"
PLAN_FORMAT = 1


@dataclass(frozen=True)
class PlannedRun:
    """One run as planned.

    Attributes
    ----------
    index : int
    method : str
    seed : int
    chains : int
    threads : int
        ``num_threads`` for the process; 0 leaves it out (executable without threads).
    args : dict
        Checked method arguments (:func:`stanflow.runs.arguments.check_args`).
    data : str or None
        File name under ``inputs/``.
    inits : str, float or None
        File name under ``inputs/``, or an init radius.
    """

    index: int
    method: str
    seed: int
    chains: int
    threads: int
    args: dict[str, Any]
    data: str | None
    inits: str | float | None


@dataclass(frozen=True)
class Plan:
    """A run set's plan.

    Attributes
    ----------
    exe : str
        Absolute path of the model executable.
    root_seed : int
    batch : bool
        Whether the executable has stanflow's batch mode.
    runs : tuple of PlannedRun
    """

    exe: str
    root_seed: int
    batch: bool
    runs: tuple[PlannedRun, ...]

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict (with a format number)."""
        return {"format": PLAN_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        """Inverse of :meth:`to_json`."""
        if data.get("format") != PLAN_FORMAT:
            raise ValueError(f"unknown run set plan format {data.get('format')!r}")
        return cls(
            exe=data["exe"],
            root_seed=data["root_seed"],
            batch=data["batch"],
            runs=tuple(PlannedRun(**run) for run in data["runs"]),
        )


def make_plan(
    runs: Sequence[CheckedRun], *, exe: str, root_seed: int, batch: bool, folder: Path
) -> Plan:
    """Write the runs' data and inits under ``folder/inputs`` and return the plan.

    Parameters
    ----------
    runs : sequence of CheckedRun
    exe : str
        The model executable.
    root_seed : int
        Root of the seeds of runs without their own.
    batch : bool
        Whether ``exe`` has stanflow's batch mode.
    folder : pathlib.Path
        The run set's folder (created if needed).

    Returns
    -------
    Plan
    """
    inputs = folder / INPUTS_DIR
    inputs.mkdir(parents=True, exist_ok=True)
    planned = []
    for run in runs:
        inits = (
            _write_input(inputs, "inits", run.inits)
            if isinstance(run.inits, Mapping)
            else run.inits
        )
        planned.append(
            PlannedRun(
                index=run.index,
                method=run.method,
                seed=run.seed
                if run.seed is not None
                else run_seed(root_seed, run.index),
                chains=run.chains,
                threads=run.threads,
                args=run.args,
                data=None
                if run.data is None
                else _write_input(inputs, "data", run.data),
                inits=inits,
            )
        )
    return Plan(exe=exe, root_seed=root_seed, batch=batch, runs=tuple(planned))


def write_plan(folder: Path, plan: Plan) -> None:
    """Write ``plan.json`` atomically; an existing plan must be the same plan.

    Raises
    ------
    ValueError
        If ``folder`` already holds a different run set.
    """
    path = folder / PLAN_FILE
    if path.exists():
        if read_plan(folder) != plan:
            raise ValueError(
                f"out_dir {folder} already holds a different run set; use a new "
                "folder, or RunSet.open(out_dir) to continue that one"
            )
        return
    text = json.dumps(plan.to_json(), indent=1)
    write_atomic(path, lambda tmp: Path(tmp).write_text(text))


def read_plan(folder: Path) -> Plan:
    """Read ``folder/plan.json``.

    Raises
    ------
    ValueError
        If there is no plan in ``folder``.
    """
    path = Path(folder) / PLAN_FILE
    if not path.is_file():
        raise ValueError(f"no run set in {folder}: {PLAN_FILE} not found")
    return Plan.from_json(json.loads(path.read_text()))


def _write_input(folder: Path, prefix: str, values: Mapping[str, Any]) -> str:
    """Write Stan JSON named by its content's sha256; return the file name."""
    fd, tmp = tempfile.mkstemp(prefix=f".{prefix}-", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        cmdstanpy.write_stan_json(tmp, values)
        digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()[:20]
        name = f"{prefix}-{digest}.json"
        os.replace(tmp, folder / name)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return name
