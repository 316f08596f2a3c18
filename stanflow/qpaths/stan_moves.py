"""Stan NUTS moves for q-path SMC and AIS: particles as chains, through the run layer.

At each temperature every particle becomes one single-chain run of the q-path
template (``stan/qpaths/qpath.stan``) with ``beta`` and ``q`` as data, the
particle as its inits and no warm-up: ``n_moves`` NUTS transitions with a
fixed step size and a diagonal metric, which leave ``pi_{beta,q}`` invariant.
The runs of one temperature form one :class:`~stanflow.runs.RunSet`, so the
run layer packs them into a few batch-mode processes (``docs/runs.md``).

Tuning (from the particles, before the moves, so each kernel is fixed while
it runs): the inverse metric is the particles' variance; the step size
starts at ``d^(-1/4)`` and after each temperature is multiplied by
``exp(accept - target_accept)`` with ``accept`` the mean of Stan's
``accept_stat__`` (clipped to a factor in ``[0.5, 2]``).

The moved particles' log densities are recomputed by the NumPy callables of
the SMC, which must agree with the Stan slots (same densities, same
constants). The draws are written with 18 significant digits
(``sig_figs``), so a moved particle is the NUTS state itself.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import cmdstanpy
import numpy as np

from stanflow.outdir import Interrupted
from stanflow.qpaths.kernels import LogDensity, MoveInfo, Particles, evaluate
from stanflow.runs import RunSet, RunSpec

DATA_KEYS = ("d", "n_base_params", "base_params", "n_target_params", "target_params")


class StanMoves:
    """A move kernel for :func:`~stanflow.qpaths.annealing.smc` / ``ais`` running NUTS.

    Parameters
    ----------
    model : cmdstanpy.CmdStanModel
        The compiled q-path template with the base and target slots filled.
    data : mapping
        Its data without ``beta`` and ``q``: ``d``, ``n_base_params``,
        ``base_params``, ``n_target_params``, ``target_params``.
    work_dir : path, optional
        Scratch folder: the run sets of each temperature go in a subfolder of
        it that is removed after reading (nothing is kept); default the
        system's temporary folder.
    target_accept : float, default 0.8
        Mean ``accept_stat__`` the step-size rule aims at, in ``(0, 1)``.
    max_depth : int, default 6
        NUTS tree depth limit.

    Attributes
    ----------
    step_size : float or None
        The step size of the next call (``None`` before the first).
    history : list of dict
        Per call: ``beta``, ``step_size``, ``accept`` (mean ``accept_stat__``),
        ``seconds``.
    """

    def __init__(
        self,
        model: Any,
        data: Mapping[str, Any],
        work_dir: str | Path | None = None,
        target_accept: float = 0.8,
        max_depth: int = 6,
    ) -> None:
        missing = [key for key in DATA_KEYS if key not in data]
        if missing:
            raise ValueError(f"data is missing {missing} (needs {list(DATA_KEYS)})")
        extra = {"beta", "q"} & set(data)
        if extra:
            raise ValueError(
                f"data must not hold {sorted(extra)}: they are set per move"
            )
        self._setup(target_accept, work_dir, max_depth)
        self.model = model
        self.data = dict(data)

    def _setup(self, target_accept: float, work_dir: str | Path | None, max_depth: int) -> None:
        """The tuning state and options every NUTS move kernel has."""
        if not 0 < target_accept < 1:
            raise ValueError(f"target_accept must lie in (0, 1), got {target_accept}")
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self.target_accept = target_accept
        self.max_depth = int(max_depth)
        self.step_size: float | None = None
        self.history: list[dict] = []

    def __call__(
        self,
        rng: np.random.Generator,
        particles: Particles,
        beta: float,
        q: float,
        log_pi0: LogDensity,
        log_pi1: LogDensity,
        n_moves: int | None,
    ) -> tuple[Particles, MoveInfo]:
        """``n_moves`` NUTS transitions of every particle targeting ``pi_{beta,q}``.

        Returns
        -------
        (Particles, MoveInfo)
            The moved particles (log densities from ``log_pi0``, ``log_pi1``)
            and the mean ``accept_stat__`` over particles and transitions.

        Raises
        ------
        ValueError
            If ``n_moves`` is None or the particles do not fit the program.
        RuntimeError
            If a run fails; the message holds the run's console text.
        """
        if n_moves is None:
            raise ValueError("n_moves: NUTS moves need a fixed number of transitions")
        z = particles.z
        self._check(z, q)
        if self.step_size is None:
            self.step_size = float(z.shape[1] ** -0.25)
        step_size = self.step_size
        root = Path(tempfile.mkdtemp(prefix="stan-moves-", dir=self.work_dir))
        try:
            moved, accept, seconds = self._run(rng, z, beta, q, n_moves, step_size, root)
        except Interrupted:  # its folder is removed below: nothing is kept to resume
            raise KeyboardInterrupt from None
        finally:
            shutil.rmtree(root, ignore_errors=True)
        self.history.append(
            self._where(beta) | {"step_size": step_size, "accept": accept, "seconds": seconds}
        )
        self.step_size = adapted_step_size(step_size, accept, self.target_accept)
        return evaluate(moved, log_pi0, log_pi1), MoveInfo(accept, n_moves)

    def _check(self, z: np.ndarray, q: float) -> None:
        if z.shape[1] != int(self.data["d"]):
            raise ValueError(
                f"particles have dimension {z.shape[1]}, data['d'] is {self.data['d']}"
            )

    def _where(self, beta: float) -> dict[str, float]:
        """The history entry's place on the path."""
        return {"beta": beta}

    def _run(
        self,
        rng: np.random.Generator,
        z: np.ndarray,
        beta: float,
        q: float,
        n_moves: int,
        step_size: float,
        root: Path,
    ) -> tuple[np.ndarray, float, float]:
        return nuts_transitions(
            self.model,
            self.data | {"beta": float(beta), "q": float(q)},
            [{"z": particle.tolist()} for particle in z],
            [f"z[{k + 1}]" for k in range(z.shape[1])],
            inv_metric=np.var(z, axis=0),
            step_size=step_size,
            n_moves=n_moves,
            max_depth=self.max_depth,
            root=root,
            seed=int(rng.integers(2**63)),
            where=f"at beta = {beta}, q = {q}",
        )


def adapted_step_size(step_size: float, accept: float, target_accept: float) -> float:
    """The next call's NUTS step size: ``step_size * exp(accept - target_accept)``,
    the factor clipped to ``[0.5, 2]`` (grows when the moves accepted more than
    the target, shrinks when less)."""
    return step_size * float(np.clip(np.exp(accept - target_accept), 0.5, 2.0))


def nuts_transitions(
    model: cmdstanpy.CmdStanModel,
    data: dict[str, Any],
    inits: list[dict[str, Any]],
    columns: list[str],
    *,
    inv_metric: np.ndarray,
    step_size: float,
    n_moves: int,
    max_depth: int,
    root: Path,
    seed: int,
    where: str,
) -> tuple[np.ndarray, float, float]:
    """``n_moves`` NUTS transitions from each initial point, one run per point.

    No adaptation: the step size and the diagonal inverse metric are given
    (zero variances become 1); the runs go through one run set in ``root``.

    Parameters
    ----------
    model : cmdstanpy.CmdStanModel
    data : dict
        The data of every run.
    inits : list of dict
        One initial point per particle, by parameter name.
    columns : list of str
        The CSV columns that make a particle, e.g. ``["z[1]", "z[2]"]``.
    inv_metric : ndarray, shape (d,)
    step_size : float
    n_moves, max_depth : int
    root : pathlib.Path
        Folder for the metric file and the run set.
    seed : int
        The run set's root seed.
    where : str
        Says where in the algorithm the moves are, for error messages.

    Returns
    -------
    moved : ndarray, shape (len(inits), len(columns))
        The last draw of each run.
    accept : float
        Mean ``accept_stat__`` over runs and transitions.
    seconds : float
        Sum of the runs' wall times.

    Raises
    ------
    RuntimeError
        If a run fails; the message holds its status and console text.
    """
    metric = root / "metric.json"
    metric.write_text(
        json.dumps({"inv_metric": np.where(inv_metric > 0, inv_metric, 1.0).tolist()})
    )
    args = {
        "num_warmup": 0,
        "num_samples": int(n_moves),
        "adapt.engaged": False,
        "stepsize": step_size,
        "metric": "diag_e",
        "metric_file": str(metric),
        "max_depth": max_depth,
        "sig_figs": 18,
    }
    specs = [RunSpec(data=data, inits=init, args=args) for init in inits]
    runset = RunSet(model, specs, out_dir=root / "runs", root_seed=seed)
    moved = np.empty((len(inits), len(columns)))
    accept = np.empty(len(inits))
    seconds = 0.0
    with closing(runset.run(progress=False)) as results:
        for result in results:
            if not result.ok:
                raise RuntimeError(
                    f"NUTS move of particle {result.index} {where} ended with "
                    f"{result.status}: {result.message}"
                )
            draws = result.draws()
            names = list(draws.names)
            moved[result.index] = draws.values[0, -1, [names.index(c) for c in columns]]
            accept[result.index] = draws.values[0, :, names.index("accept_stat__")].mean()
            seconds += result.wall_time
    return moved, float(accept.mean()), seconds
