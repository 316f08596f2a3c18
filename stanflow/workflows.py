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

A run stopped by Ctrl-C ends in :class:`stanflow.outdir.Interrupted`, one
stopped by a write the disk refused in :class:`stanflow.outdir.RunFailed`:
one-line messages saying what the folder kept (finished :class:`Pieces` and
:class:`Checkpoint` pieces, or complete files). The command lines
(``stanflow run`` and a script's ``--out``) check and lock the folder first
(:func:`stanflow.outdir.prepare`, :func:`stanflow.outdir.hold`).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import json
import math
import os
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from types import ModuleType
from typing import Any

from stanflow import outdir, provenance
from stanflow.atomic import write_atomic
from stanflow.resources import resource_dir

WORKFLOWS_DIR = resource_dir("workflows")
"""Where workflow scripts live (the repository's ``workflows/``, or its copy in the package)."""
DATA_DIR = resource_dir("data")
"""Small data sets shipped with stanflow (see ``data/README.md``)."""

RunFunction = Callable[[Path, bool], Mapping[str, Any]]

_running_stores: list[dict[Path, Checkpoint | Pieces]] = []
"""Per running :func:`execute` (innermost last), the piece stores its workflow made, by place."""


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
    stores: dict[Path, Checkpoint | Pieces] = {}
    _running_stores.append(stores)
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
    finally:
        _running_stores[:] = [other for other in _running_stores if other is not stores]
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


def write_json(path: Path, record: Mapping[str, Any]) -> Path:
    """Write ``record`` as JSON to ``path`` atomically, as :func:`write_summary` does.

    Long workflows use it to checkpoint finished pieces: a file is either
    complete or absent, so a rerun can trust every file it finds.
    """
    path = Path(path)
    text = json.dumps(_jsonable(record, path.stem), indent=2, allow_nan=False) + "\n"
    return write_text(path, text)


class Checkpoint:
    """Finished pieces of a long workflow, kept in one JSON file.

    A piece is computed once: :meth:`get` returns the stored record when the
    file was written with the same ``settings``, otherwise computes the piece,
    adds its ``seconds`` and rewrites the file atomically. A file written with
    other settings is ignored (and overwritten by the first new piece), so a
    changed workflow never mixes its pieces with an old run's.

    Parameters
    ----------
    path : Path
        The JSON file, usually inside the workflow's output folder.
    settings : mapping
        Everything the pieces depend on, JSON-like.
    """

    def __init__(self, path: Path, settings: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.record: dict[str, Any] = self._stored(settings) or {
            "settings": settings,
            "pieces": {},
        }
        if _running_stores:
            _running_stores[-1][self.path] = self

    def get(
        self, key: str, compute: Callable[..., dict], *args: Any, **kwargs: Any
    ) -> dict:
        """The piece ``key``: stored, or ``compute(*args, **kwargs)`` stored now."""
        if key not in self.record["pieces"]:
            start = time.perf_counter()
            piece = compute(*args, **kwargs)
            self.record["pieces"][key] = piece | {"seconds": time.perf_counter() - start}
            write_json(self.path, self.record)
        return self.record["pieces"][key]

    def seconds(self) -> float:
        """Wall seconds spent computing the stored pieces, over all runs into the folder."""
        return float(sum(piece["seconds"] for piece in self.record["pieces"].values()))

    def finished(self) -> int:
        """How many pieces the file holds now for these settings (what a rerun reuses)."""
        stored = self._stored(self.record["settings"])
        return 0 if stored is None else len(stored["pieces"])

    def _stored(self, settings: Mapping[str, Any]) -> dict[str, Any] | None:
        """The file's record if it was written with ``settings``, else ``None``."""
        if self.path.is_file():
            stored = json.loads(self.path.read_text())
            if stored.get("settings") == json.loads(json.dumps(settings)):
                return stored
        return None


def seed_spread(values: Iterable[float]) -> dict[str, Any]:
    """``{"mean", "sd", "per_seed"}`` of per-seed values (the sample sd; 0 for one value)."""
    per_seed = [float(value) for value in values]
    sd = statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0
    return {"mean": statistics.fmean(per_seed), "sd": sd, "per_seed": per_seed}


class Stopped(RuntimeError):
    """Raised by :meth:`Pieces.get` once the run is stopping."""


class Pieces:
    """Finished pieces, one JSON file each under ``folder``: a rerun reads them back.

    A piece may also keep a partial state in :meth:`scratch` while it runs.
    One file per piece (not one :class:`Checkpoint` file), so that threads
    (:func:`run_parallel`) write their pieces concurrently. A file
    written under another configuration is an error naming it: a piece can
    cost a quarter of an hour, so it is never dropped silently. Once
    :attr:`stop` is set, no new piece starts.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.stop = threading.Event()
        if _running_stores:
            _running_stores[-1][self.folder] = self

    def get(self, name: str, config: dict, compute: Callable[[], dict]) -> dict:
        """The piece ``name``: read back, or computed (its wall ``seconds`` added) and written."""
        path = self.folder / f"{name}.json"
        if path.is_file():
            record = json.loads(path.read_text())
            if record.get("config") != json.loads(json.dumps(config)):
                raise ValueError(
                    f"{path} is from another configuration ({record.get('config')}, "
                    f"not {config}): choose another --out or remove it"
                )
            shutil.rmtree(self.scratch(name), ignore_errors=True)  # a crash's leftover
            return record
        if self.stop.is_set():
            raise Stopped(f"not started: {name}")
        start = time.perf_counter()
        # seconds: of the run that finished the piece (a resumed piece's earlier runs not counted)
        record = {"config": config} | compute() | {"seconds": time.perf_counter() - start}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, record)
        shutil.rmtree(self.scratch(name), ignore_errors=True)
        print(f"done in {record['seconds']:.0f} s: {path}", file=sys.stderr, flush=True)
        return json.loads(path.read_text())

    def finished(self) -> int:
        """How many pieces the folder holds now (each file is complete: written atomically)."""
        return len(list(self.folder.glob("*.json")))

    def scratch(self, name: str) -> Path:
        """The folder where the piece ``name`` may keep its partial state (not made here).

        For a piece that checkpoints itself (the ``checkpoint`` of
        :func:`stanflow.lcvi.mf_minibatch.fit` and
        :func:`stanflow.lcvi.run_lcvi_joint`, which make it); :meth:`get`
        removes it once the piece is written or read back.
        """
        return self.folder / f"{name}.partial"


def run_parallel(tasks: list[Callable[[], Any]], pieces: Pieces, jobs: int) -> list[Any]:
    """Every task's result, ``jobs`` at a time in threads; the first failure stops the run.

    The tasks compute their pieces through ``pieces``: after a failure or
    Ctrl-C no new piece starts, the running ones finish and are written, so a
    rerun loses nothing finished. Threads suit work that leaves Python
    (Stan through bridgestan or CmdStan, NumPy's large array operations).
    """

    def guarded(task: Callable[[], Any]) -> Any:
        try:
            return task()
        except BaseException:
            pieces.stop.set()  # before any other task can start a piece
            raise

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(guarded, task) for task in tasks]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failures = [error for f in done if (error := f.exception()) is not None]
        if failures:  # the cause, not the pieces it stopped
            raise next((e for e in failures if not isinstance(e, Stopped)), failures[0])
        return [future.result() for future in futures]
    finally:
        pieces.stop.set()
        pool.shutdown(cancel_futures=True)


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: the file is either the old one or the new one.

    Returns
    -------
    pathlib.Path
        The file written.
    """
    return write_atomic(Path(path), lambda tmp: Path(tmp).write_text(text))


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


def _jsonable(value: Any, where: str) -> Any:
    """A JSON-ready copy of ``value``; ``where`` names it in errors."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, f"{where}[{k!r}]") for k, v in value.items()}
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return _jsonable(value.tolist(), where)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(
        f"{where} is a {type(value).__name__}, which cannot be written as JSON"
    )


def _name_of(run: RunFunction) -> str:
    """The workflow name of a ``run`` function: its script's, as in :func:`_scripts`."""
    return Path(inspect.getfile(run)).stem.replace("_", "-")


def _scripts() -> dict[str, Path]:
    """Workflow names -> script paths; files starting with ``_`` are skipped."""
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
    """Import a workflow script as module ``stanflow_workflow_<name>``."""
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
