"""Where a run's files live in the run folder, and its CmdStan command line.

Layout of a run folder (run ``i`` written as ``00012``)::

    plan.json, manifest.jsonl      the plan and the record of attempts
    inputs/                        data and inits (content-addressed Stan JSON)
    output/run-00012.csv           draws; run-00012_<chain>.csv with several chains
    logs/run-00012.<attempt>.log   console text of each attempt
    staging/<session>/             where a session's attempts write; moved to output/

Each call of ``RunSet.run`` is a session with its own staging folder, so an
executable left running by a killed session can never write over a later
session's files.
"""

from __future__ import annotations

from pathlib import Path

from stanflow.runs.arguments import method_tokens, output_tokens
from stanflow.runs.plan import INPUTS_DIR, PlannedRun

OUTPUT_DIR = "output"
STAGING_DIR = "staging"
LOGS_DIR = "logs"


def output_files(folder: Path, run: PlannedRun) -> tuple[Path, ...]:
    """The final CSV files of ``run``: one per chain, named as CmdStan names them."""
    return staged_files(folder / OUTPUT_DIR, run)


def staged_files(directory: Path, run: PlannedRun) -> tuple[Path, ...]:
    """The CSV files ``run`` writes into ``directory`` (chains ``1..chains``)."""
    stem = _stem(run)
    if run.chains == 1:
        return (directory / f"{stem}.csv",)
    return tuple(
        directory / f"{stem}_{chain}.csv" for chain in range(1, run.chains + 1)
    )


def console_file(folder: Path, run: PlannedRun, attempt: int) -> Path:
    """The console text of attempt ``attempt`` (from 1) of ``run``."""
    return folder / LOGS_DIR / f"{_stem(run)}.{attempt}.log"


def command_tokens(folder: Path, run: PlannedRun, staging: Path) -> list[str]:
    """CmdStan's command line for ``run`` (without the executable).

    Parameters
    ----------
    folder : pathlib.Path
        The run set's folder (for the input files).
    run : PlannedRun
    staging : pathlib.Path
        Folder the output goes to; with ``chains > 1`` CmdStan itself names
        the files ``<stem>_<chain>.csv`` (:func:`staged_files`).
    """
    tokens = ["id=1"]
    if run.data is not None:
        tokens += ["data", f"file={folder / INPUTS_DIR / run.data}"]
    if run.inits is not None:
        inits = (
            run.inits
            if isinstance(run.inits, float)
            else folder / INPUTS_DIR / run.inits
        )
        tokens += [f"init={inits}"]
    tokens += [
        "random",
        f"seed={run.seed}",
        "output",
        f"file={staging / _stem(run)}.csv",
        *output_tokens(run.args),
    ]
    if run.threads:
        tokens += [f"num_threads={run.threads}"]
    tokens += method_tokens(run.method, run.args)
    if run.chains > 1:
        tokens += [f"num_chains={run.chains}"]
    return tokens


def _stem(run: PlannedRun) -> str:
    return f"run-{run.index:05d}"
