"""The public API: a set of independent Stan runs of one compiled model.

Three steps, as in cmdstanpy (model, run, fit): :class:`RunSet` validates the
specifications and writes the plan into its folder; :meth:`RunSet.run` executes
what is not done yet, yielding a :class:`RunResult` per run as it finishes;
:meth:`RunSet.to_inference_data` reads all results into one InferenceData with
a ``run`` dimension. :meth:`RunSet.open` and :func:`resume` continue a run set
from its folder alone, for instance after a crash. How one call of
:meth:`RunSet.run` schedules and follows its runs is :mod:`stanflow.runs.session`;
what the folder says of each run, :mod:`stanflow.runs.bookkeeping`.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Generator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import cmdstanpy

from stanflow import arviz_compat
from stanflow.arviz_compat import Results
from stanflow.runs.batch import supports_batch
from stanflow.runs.bookkeeping import RunResult, is_done, run_result, run_stats
from stanflow.runs.commands import output_files
from stanflow.runs.executors import Executor, LocalExecutor
from stanflow.runs.manifest import read_manifest
from stanflow.runs.plan import Plan, make_plan, read_plan, write_plan
from stanflow.runs.results import collect
from stanflow.runs.seeds import new_root_seed
from stanflow.runs.session import run_session
from stanflow.runs.sizes import declared_shapes
from stanflow.runs.spec import (
    InvalidRunSpec,
    ModelInterface,
    RunSpec,
    as_spec,
    check_spec,
)
from stanflow.validation import check_int, is_number


class RunSet:
    """Independent runs of one compiled model, with their own folder.

    Parameters
    ----------
    model : cmdstanpy.CmdStanModel
        A compiled model (e.g. from :func:`stanflow.models.compile_model`).
    specs : iterable of RunSpec or mapping
        One specification per run; a mapping holds :class:`RunSpec` fields.
        All runs share one method and number of chains, so that their results
        stack into one InferenceData.
    out_dir : str or os.PathLike
        The run set's folder: plan, manifest, inputs, outputs, console logs.
        If it already holds this same run set, the RunSet continues it.
    root_seed : int, optional
        Seeds of runs without their own come from it (run ``i`` gets the
        ``i``-th ``SeedSequence`` child), so results do not depend on
        scheduling. Default: fresh entropy, recorded in the plan.

    Raises
    ------
    TypeError
        If ``model`` is not a CmdStanModel.
    ValueError
        If the executable does not exist, ``specs`` is empty, or ``out_dir``
        holds a different run set.
    InvalidRunSpec
        If a specification does not fit the model or CmdStan's arguments, naming
        the run and the field. Nothing is written or launched then.
    """

    def __init__(
        self,
        model: cmdstanpy.CmdStanModel,
        specs: Iterable[RunSpec | Mapping[str, Any]],
        *,
        out_dir: str | os.PathLike,
        root_seed: int | None = None,
    ) -> None:
        exe, interface = _model_interface(model)
        specs = list(specs)
        if not specs:
            raise ValueError("specs is empty: a run set needs at least one run")
        checked = [
            check_spec(as_spec(spec, i), i, interface) for i, spec in enumerate(specs)
        ]
        for run in checked[1:]:
            for name in ("method", "chains"):
                if getattr(run, name) != getattr(checked[0], name):
                    raise InvalidRunSpec(
                        run.index,
                        name,
                        f"{getattr(run, name)!r} differs from run 0's "
                        f"{getattr(checked[0], name)!r}; the runs of a run set share "
                        "one method and number of chains",
                    )
        root_seed = new_root_seed() if root_seed is None else check_int(root_seed, "root_seed", 0)
        folder = Path(out_dir).absolute()
        folder.mkdir(parents=True, exist_ok=True)
        plan = make_plan(
            checked,
            exe=exe,
            root_seed=int(root_seed),
            batch=supports_batch(exe),
            folder=folder,
        )
        write_plan(folder, plan)
        self._folder = folder
        self._plan = plan

    @classmethod
    def open(cls, out_dir: str | os.PathLike) -> RunSet:
        """The run set in ``out_dir``, from its plan alone (no model needed).

        Raises
        ------
        ValueError
            If ``out_dir`` holds no run set.
        """
        runset = cls.__new__(cls)
        runset._folder = Path(out_dir).absolute()
        runset._plan = read_plan(runset._folder)
        return runset

    @property
    def out_dir(self) -> Path:
        """The run set's folder."""
        return self._folder

    @property
    def plan(self) -> Plan:
        """What every run does (method, arguments, seed, input files)."""
        return self._plan

    def __len__(self) -> int:
        return len(self._plan.runs)

    def run(
        self,
        executor: Executor | None = None,
        *,
        retries: int = 1,
        timeout: float | None = None,
        chunk_size: int | None = None,
        progress: bool = True,
    ) -> Generator[RunResult, None, None]:
        """Run what is not done yet; yield each run's result as it finishes.

        Runs already done (an ``ok`` record in the manifest and their files
        present) are skipped, so calling this again after an interruption
        resumes. Nothing runs until the returned iterator is consumed, e.g.
        ``for result in runset.run(): ...`` or ``list(runset.run())``.

        Parameters
        ----------
        executor : Executor, optional
            Where to run: :class:`~stanflow.runs.LocalExecutor` (default) or
            :class:`~stanflow.runs.DaskExecutor`.
        retries : int
            Further attempts for a run that fails or times out, per call.
        timeout : float, optional
            Seconds one attempt may take before it is killed.
        chunk_size : int, optional
            Runs per executable process; default from the number of runs and cores.
        progress : bool
            Show a progress bar.

        Yields
        ------
        RunResult
            One per run that was not done, in the order they finish; failed
            runs too (after their last attempt), with their console text.

        Raises
        ------
        ValueError
            If an option is invalid (raised here, before anything runs).
        RuntimeError
            If another process is running this run set.
        stanflow.outdir.Interrupted
            On Ctrl-C while it waits for runs (a ``KeyboardInterrupt``): the
            running processes are killed, the finished runs stay recorded, and
            the message says how many and how to resume, e.g. ``interrupted;
            kept 37 finished runs of 200 in DIR; resume with:
            stanflow.runs.resume('DIR'), or the same call again with the same seed and out_dir``.
        """
        retries = check_int(retries, "retries", 0)
        if timeout is not None and (not is_number(timeout) or not timeout > 0):
            raise ValueError(f"timeout must be a number > 0 or None, got {timeout!r}")
        if chunk_size is not None:
            chunk_size = check_int(chunk_size, "chunk_size")
        if executor is not None and not isinstance(executor, Executor):
            raise TypeError(
                f"executor must be an Executor, got {type(executor).__name__}"
            )
        if not os.access(self._plan.exe, os.X_OK):
            raise ValueError(
                f"the model executable {self._plan.exe} no longer exists; compile "
                "the model again (same program and options give the same path)"
            )
        return run_session(
            self._folder,
            self._plan,
            executor or LocalExecutor(),
            retries=int(retries),
            timeout=None if timeout is None else float(timeout),
            chunk_size=chunk_size,
            progress=progress,
        )

    def results(self) -> list[RunResult]:
        """The latest result of every run that has one, by index."""
        records = read_manifest(self._folder)
        return [
            run_result(self._folder, run, records[run.index])
            for run in self._plan.runs
            if run.index in records
        ]

    def missing(self) -> list[int]:
        """Indices of the runs that are not done."""
        records = read_manifest(self._folder)
        return [
            run.index for run in self._plan.runs if not is_done(self._folder, run, records)
        ]

    def to_inference_data(
        self,
        *,
        coords: Mapping[str, Sequence[Any]] | None = None,
        dims: Mapping[str, Sequence[str]] | None = None,
    ) -> Results:
        """All results as one InferenceData with a ``run`` dimension.

        Parameters
        ----------
        coords, dims
            Coordinates and dim names for the Stan variables' own dims, as in
            :func:`stanflow.idata.to_inference_data`.

        Returns
        -------
        Results
            ``posterior`` and ``sample_stats`` with dims ``(chain, draw, run,
            ...)``; runs without results hold NaN. ``run_stats`` per run:
            ``status`` (``ok``, ``failed``, ``timeout``, ``error`` or
            ``missing``), ``attempts``, ``exit_code`` (-1 when there is none),
            ``seed``, ``wall_time``, and per ``(run, chain)`` ``total_time``
            (the CSV's ``Elapsed Time ... (Total)``) and, for ``sample``,
            ``divergences``. Root attributes: ``method``, ``root_seed``,
            ``n_runs``, ``n_ok``.

        Raises
        ------
        ValueError
            If no run has results, or runs have different output shapes.
        """
        records = read_manifest(self._folder)
        runs = self._plan.runs
        done = [is_done(self._folder, run, records) for run in runs]
        method = runs[0].method
        groups = collect(
            [
                output_files(self._folder, run) if ok else None
                for run, ok in zip(runs, done, strict=True)
            ],
            method,
            coords=coords,
            dims=dims,
        )
        stats = run_stats(runs, records).merge(groups.pop("chain_stats"))
        attrs = {
            "method": method,
            "root_seed": str(self._plan.root_seed),
            "n_runs": len(runs),
            "n_ok": int(sum(done)),
        }
        return arviz_compat.build(groups | {"run_stats": stats}, attrs=attrs)


def resume(
    out_dir: str | os.PathLike, executor: Executor | None = None, **options: Any
) -> RunSet:
    """Finish the run set in ``out_dir``: run only what is missing, then return it.

    Parameters
    ----------
    out_dir : str or os.PathLike
        A run set's folder.
    executor : Executor, optional
    **options
        ``retries``, ``timeout``, ``chunk_size``, ``progress``: see :meth:`RunSet.run`.

    Returns
    -------
    RunSet
        Its results equal those of an uninterrupted run: seeds, data and
        arguments all come from the plan.

    Raises
    ------
    stanflow.outdir.Interrupted
        On Ctrl-C, as :meth:`RunSet.run`.
    """
    runset = RunSet.open(out_dir)
    # consumed by C code: Ctrl-C then always lands inside the run, which says what it kept
    deque(runset.run(executor, **options), maxlen=0)
    return runset


def _model_interface(model: cmdstanpy.CmdStanModel) -> tuple[str, ModelInterface]:
    if not isinstance(model, cmdstanpy.CmdStanModel):
        raise TypeError(
            f"model must be a cmdstanpy.CmdStanModel, got {type(model).__name__}"
        )
    exe = model.exe_file
    if not exe or not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        raise ValueError(
            f"model: executable {exe!r} does not exist; compile the model first"
        )
    info = model.src_info() if model.stan_file else {}
    shapes = declared_shapes(model.code() or "") if model.stan_file else None
    threaded = str(model.exe_info().get("STAN_THREADS", "false")).lower() == "true"
    return str(Path(exe).absolute()), ModelInterface(
        inputs=info.get("inputs"),
        parameters=info.get("parameters"),
        threaded=threaded,
        shapes=shapes,
    )
