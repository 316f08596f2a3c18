"""Many independent Stan runs at once: run sets, local or on a Dask cluster.

Every method in stanflow launches many runs of one model (bootstrap replicates,
learning-rate grids, SMC moves, weighted-bootstrap draws). A :class:`RunSet`
takes a compiled model and one :class:`RunSpec` per run, validates them all
before anything starts, runs them on an executor (:class:`LocalExecutor` or
:class:`DaskExecutor`), streams results back as they finish, survives failures
and interruptions (retries, timeouts, a manifest and :func:`resume`), and
collects everything into one ``InferenceData`` with a ``run`` dimension.
In-process work (Python calls of a Stan program loaded in process) spreads the
same way through :class:`Workers`. See ``docs/runs.md``.

Example
-------
>>> specs = [{"data": d} for d in replicates]
>>> runset = RunSet(model, specs, out_dir="boot", root_seed=1)
>>> for result in runset.run():
...     print(result.index, result.status)
>>> idata = runset.to_inference_data()
"""

from stanflow.runs.bookkeeping import RunResult
from stanflow.runs.calls import CallFailed, Workers
from stanflow.runs.executors import DaskExecutor, Executor, LocalExecutor
from stanflow.runs.results import RunDraws
from stanflow.runs.runset import RunSet, resume
from stanflow.runs.spec import InvalidRunSpec, RunSpec

__all__ = [
    "CallFailed",
    "DaskExecutor",
    "Executor",
    "InvalidRunSpec",
    "LocalExecutor",
    "RunDraws",
    "RunResult",
    "RunSet",
    "RunSpec",
    "Workers",
    "resume",
]
