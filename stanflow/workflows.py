"""Registry of workflows (one script per experiment) and helpers they share.

A workflow is a script ``workflows/<name>.py`` shipped with stanflow (workflow
``eight-schools`` is ``workflows/eight_schools.py``) defining::

    DESCRIPTION: str                          # one line, shown by `stanflow list`
    def run(out: Path, quick: bool) -> dict:  # writes figures and <name>.nc into out

and ending in ``if __name__ == "__main__": sys.exit(main(run, DESCRIPTION))`` so
that ``python workflows/<name>.py --out DIR [--quick]`` works. The summary dict
``run`` returns is written to ``out/summary.json`` by the runner, so every
workflow has one, with the runner's ``provenance`` block (command, seed, quick
or full, source commit, machine, times; :mod:`stanflow.provenance`). A
workflow reports its seed(s) under the summary key ``seed``.

Most workflows declare an :class:`stanflow.experiment.Experiment` (settings,
cells, the computation of a cell, summary, figures) and let it run them:
seeds, checkpoints and resume, parallel cells. A run stopped by Ctrl-C ends in
:class:`stanflow.outdir.Interrupted`, one stopped by a write the disk refused
in :class:`stanflow.outdir.RunFailed`: one-line messages saying what the
folder kept (finished pieces, or complete files). The command lines
(``stanflow run`` and a script's ``--out``) check and lock the folder first
(:func:`stanflow.outdir.prepare`, :func:`stanflow.outdir.hold`).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import json
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from stanflow import outdir, provenance
from stanflow.atomic import write_atomic, write_json, write_text
from stanflow.pieces import opened_stores
from stanflow.resources import resource_dir

__all__ = [
    "DATA_DIR",
    "WORKFLOWS_DIR",
    "execute",
    "list_workflows",
    "main",
    "run_workflow",
    "save_figure",
    "seed_spread",
    "write_json",
    "write_summary",
    "write_text",
]

WORKFLOWS_DIR = resource_dir("workflows")
"""Where workflow scripts live (the repository's ``workflows/``, or its copy in the package)."""
DATA_DIR = resource_dir("data")
"""Small data sets shipped with stanflow (see ``data/README.md``)."""

RunFunction = Callable[[Path, bool], Mapping[str, Any]]


def list_workflows() -> list[tuple[str, str]]:
    """List the available workflows.

    Returns
    -------
    list of (str, str)
        ``(name, description)`` pairs sorted by name, e.g.
        ``("eight-schools", "Eight schools ...")``. Scripts are read, not run.

    Raises
    ------
    ValueError
        If a script has no string ``DESCRIPTION``.
    """
    return [(name, _description(path)) for name, path in sorted(_scripts().items())]


def run_workflow(name: str, out: Path, quick: bool = False) -> dict[str, Any]:
    """Run a workflow, writing its outputs and ``summary.json`` into ``out``.

    Parameters
    ----------
    name : str
        A name from :func:`list_workflows`, e.g. ``"eight-schools"``.
    out : pathlib.Path
        Output folder, created if missing.
    quick : bool, default False
        Ask the workflow for a short run (fewer iterations), e.g. for CI.

    Returns
    -------
    dict
        The summary, as written to ``out/summary.json``.

    Raises
    ------
    ValueError
        If ``name`` is not a workflow; the message lists the valid names.
    """
    scripts = _scripts()
    if name not in scripts:
        raise ValueError(
            f"name: unknown workflow {name!r}; "
            f"valid workflows: {', '.join(sorted(scripts))}"
        )
    return execute(_load(name, scripts[name]).run, Path(out), quick)


def execute(run: RunFunction, out: Path, quick: bool) -> dict[str, Any]:
    """Create ``out``, call ``run(out, quick)`` and write its summary.

    Parameters
    ----------
    run : callable
        A workflow's ``run`` function; the workflow's name is its script's
        (``workflows/gibbs_path.py`` is ``gibbs-path``).
    out : pathlib.Path
        Output folder, created if missing.
    quick : bool
        Passed to ``run``.

    Returns
    -------
    dict
        The summary as written to ``out/summary.json``: what ``run`` returned
        plus ``provenance`` (:func:`stanflow.provenance.finish`).

    Raises
    ------
    TypeError
        If ``run`` does not return a mapping.
    ValueError
        If the summary has its own ``provenance`` key (the runner's).
    stanflow.outdir.Interrupted
        On Ctrl-C, saying what ``out`` kept and the command that goes on.
    stanflow.outdir.RunFailed
        If the disk refused a write (full, read-only), saying what ``out`` kept.
    """
    out = Path(out)
    start = provenance.begin(_name_of(run), out, bool(quick))
    out.mkdir(parents=True, exist_ok=True)
    with opened_stores() as stores:
        try:
            summary = run(out, bool(quick))
            if not isinstance(summary, Mapping):
                raise TypeError(f"run must return a dict summary, got {type(summary).__name__}")
            if "provenance" in summary:
                raise ValueError("the summary's key 'provenance' is the runner's; rename it")
            write_summary(
                out, {**summary, "provenance": provenance.finish(start, summary.get("seed"))}
            )
        except KeyboardInterrupt as interrupt:
            pieces = sum(store.finished() for store in stores.values()) if stores else None
            raise outdir.Interrupted(out, start.command, pieces) from interrupt
        except OSError as error:
            if not outdir.is_refused_write(error):
                raise
            raise outdir.RunFailed(error, out) from error
    return json.loads((out / "summary.json").read_text())


def main(run: RunFunction, description: str, argv: list[str] | None = None) -> int:
    """Command line of a workflow script: ``--out DIR [--quick] [--wait]``.

    As ``stanflow run``: the folder is checked and locked first, and a fault
    or Ctrl-C is one line on stderr.

    Parameters
    ----------
    run : callable
        The script's ``run`` function.
    description : str
        The script's ``DESCRIPTION``, shown by ``--help``.
    argv : list of str, optional
        Arguments; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        Exit status: 0 (the summary is printed as JSON), 1 if the folder
        cannot take the run or a write failed, 130 on Ctrl-C.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--quick", action="store_true", help="short run, e.g. for CI")
    parser.add_argument(
        "--wait", action="store_true", help="wait for another run holding --out to end"
    )
    args = parser.parse_args(argv)
    try:
        outdir.prepare(args.out)
        with outdir.hold(args.out, wait=args.wait):
            summary = execute(run, args.out, args.quick)
    except (outdir.FolderError, outdir.RunFailed) as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:
        print(f"{parser.prog}: {outdir.interrupted_text(interrupt, args.out)}", file=sys.stderr)
        return outdir.EXIT_INTERRUPTED
    print(json.dumps(summary, indent=2))
    return 0


def write_summary(out: Path, summary: Mapping[str, Any]) -> Path:
    """Write ``summary`` to ``out/summary.json`` atomically.

    NumPy scalars and arrays become numbers and lists; NaN and infinities
    become ``null``; paths become strings.

    Parameters
    ----------
    out : pathlib.Path
        An existing folder.
    summary : mapping of str to JSON-like values

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    TypeError
        If a value cannot be written as JSON; the message names its key.
    """
    return write_json(Path(out) / "summary.json", summary)


def seed_spread(values: Iterable[float]) -> dict[str, Any]:
    """``{"mean", "sd", "per_seed"}`` of per-seed values (the sample sd; 0 for one value)."""
    per_seed = [float(value) for value in values]
    sd = statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0
    return {"mean": statistics.fmean(per_seed), "sd": sd, "per_seed": per_seed}


def save_figure(fig: Any, path: Path, dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG atomically and close it.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    path : pathlib.Path
        Target file, ``*.png``.
    dpi : int, default 120

    Returns
    -------
    pathlib.Path
        The file written.
    """
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        if path.suffix != ".png":
            raise ValueError(f"path must end in .png, got {path}")
        return write_atomic(
            path,
            lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight"),
        )
    finally:
        plt.close(fig)


def _name_of(run: RunFunction) -> str:
    """The workflow name of a ``run`` function: its script's, as in :func:`_scripts`."""
    return Path(inspect.getfile(run)).stem.replace("_", "-")


def _scripts() -> dict[str, Path]:
    """Workflow names -> script paths; files starting with ``_`` (an experiment's own modules) are skipped."""
    return {
        path.stem.replace("_", "-"): path
        for path in WORKFLOWS_DIR.glob("*.py")
        if not path.name.startswith("_")
    }


def _description(path: Path) -> str:
    """The top-level string ``DESCRIPTION`` of a script, read without running it."""
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [getattr(node, "target", None)]
        )
        value = getattr(node, "value", None)
        named = any(isinstance(t, ast.Name) and t.id == "DESCRIPTION" for t in targets)
        if named and isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
    raise ValueError(
        f"{path}: a workflow must define DESCRIPTION = '<one line>' at top level"
    )


def _load(name: str, path: Path) -> ModuleType:
    """Import a workflow script as module ``stanflow_workflow_<name>``.

    The script's folder goes on ``sys.path`` (as for ``python workflows/<name>.py``),
    so that it imports the code only an experiment uses from modules beside it
    (``workflows/_<module>.py``, not workflows themselves).
    """
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    module_name = f"stanflow_workflow_{name.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: a workflow must be a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    if not callable(getattr(module, "run", None)):
        raise ValueError(
            f"{path}: a workflow must define run(out: Path, quick: bool) -> dict"
        )
    return module
