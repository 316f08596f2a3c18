"""A loss program bound to its data: the one object every Gibbs algorithm takes.

:class:`LossProgram` is a Stan program meeting the loss-program contract
(:mod:`stanflow.gibbs.contract`) together with its data, in the spirit of
cmdstanpy's model / fit split: the program compiles once (cached by content),
every algorithm runs it, and the results come back in the installed ArviZ's
format. It holds two compiled forms of the same program:

- the **executable** of the program as written, for NUTS through cmdstanpy:
  ``omega`` and ``weights`` are data, so one executable serves every learning
  rate and every weight vector (bootstrap resamples, Bayesian-bootstrap
  weights, SafeBayes' sequential fits);
- the **evaluation form** loaded in process (bridgestan), with ``omega`` and
  ``weights`` as its last parameters: at unconstrained points ``u`` (shape
  ``(S, D)``) and any rate and weights it gives the target, its gradient, and
  each observation's loss ``loss_i = -(d target / d weights[i]) / omega``
  (the methods of :class:`~stanflow.gibbs.evaluation.EvaluationForm`, a base
  of :class:`LossProgram`).

The contract is checked when the program is loaded, before anything samples:
the declarations (:func:`~stanflow.gibbs.contract.read_program`), the data
(every input but ``omega`` and ``weights``, none of those two), and at random
points that the losses are finite and the target is
``log prior - omega * sum_i weights[i] * loss_i`` (linear in ``omega`` and in
each weight, as the contract says). A ``log_lik`` or ``loss`` vector among the
generated quantities, if the program has one, must agree with the losses the
target weights (``loss_i = -log_lik_i``).

Points are on Stan's unconstrained scale; :meth:`LossProgram.constrain` and
:meth:`LossProgram.unconstrain` map between it and the parameters as declared
(named as cmdstanpy names them, ``theta[1]``).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import EllipsisType
from typing import Any

import cmdstanpy
import numpy as np

from stanflow.gibbs.contract import (
    OMEGA,
    WEIGHTS,
    ContractError,
    ProgramSource,
    check_evaluation_form,
    contract_error,
    evaluation_form,
    read_program,
)
from stanflow.gibbs.drawn import DrawnForms, checked_drawn
from stanflow.gibbs.estimate import INIT_RADIUS, Estimate, risk_minimiser
from stanflow.gibbs.evaluation import EvaluationForm
from stanflow.gibbs.sandwich import Sandwich, sandwich
from stanflow.gibbs.slices import ObservationSlices, checked_slices, observation_layout
from stanflow.models import compile_library, compile_model, load
from stanflow.models.source import cmdstan_name, model_name
from stanflow.toolchain import installer

CHECK_POINTS = 3
"""Random points at which the contract is checked when the program is loaded."""
INIT_TRIES = 100
LINEARITY_RTOL = 1e-8
"""Relative tolerance of the check that the target is linear in the weights."""


class LossProgram(EvaluationForm):
    """A Stan program meeting the loss-program contract, bound to its data.

    Parameters
    ----------
    stan_file : str or os.PathLike
        The program (``.stan``): data with ``real<lower=0> omega;`` and
        ``vector<lower=0>[N] weights;``, target ``-omega * sum_i weights[i] *
        loss_i(theta) + log prior(theta)`` (``docs/your-own-model.md``).
    data : mapping, optional
        Every variable of its data block except ``omega`` and ``weights``,
        which stanflow sets.
    include_paths : iterable of path, optional
        Folders for the program's ``#include`` lines (its own folder and the
        shipped ``stan/`` folder are always searched).
    slots : mapping, optional
        Bindings of include names to files (a template's slots,
        :func:`stanflow.models.render`).
    name : str, optional
        The model's name in the compile cache; default the file's stem.
    threads : int, optional
        Threads of the in-process calls (default: the cores this process may use).

    Attributes
    ----------
    source : ProgramSource
        The program as read and checked.
    data : dict
        The user's data.
    n : int
        Number of observations (the size of ``weights``).
    dim : int
        Number of unconstrained parameters ``D``.
    names : list of str
        The constrained parameters, flattened and named as cmdstanpy names
        them (``["theta[1]", "theta[2]"]``); transformed parameters and
        generated quantities excluded.
    library : bridgestan.StanModel
        The evaluation form, loaded with the data (its calls are the methods of
        :class:`~stanflow.gibbs.evaluation.EvaluationForm`).
    slices : ObservationSlices or None
        The evaluation form also loaded on one observation (the prior) and, for
        large data, on chunks of them (:mod:`stanflow.gibbs.slices`), where the
        data block allows it and the slices give the whole program's prior and
        losses at the check points; None: evaluated whole.
    drawn : DrawnForms or None
        The evaluation form loaded on the observations that weights use (a
        bootstrap resample's drawn ones, :mod:`stanflow.gibbs.drawn`), where
        the data can be cut and the cut gives the whole program's target at
        the check points; None: weights are evaluated on all observations.

    Raises
    ------
    ContractError
        Naming the program, the missing or wrong piece and the contract's page:
        a missing or mistyped ``omega`` or ``weights``, data that lack a
        variable or set ``omega``/``weights``, ``omega`` or ``weights`` used
        where only data may be, losses that are not finite at any of
        :data:`INIT_TRIES` random points, a target that is not linear in the
        weights, a ``log_lik``/``loss`` generated quantity that disagrees with
        the target.
    stanflow.models.CompileError
        If the program does not compile.
    ValueError
        If Stan rejects the data (its message names the variable).
    """

    def __init__(
        self,
        stan_file: str | os.PathLike,
        data: Mapping[str, Any] | None = None,
        *,
        include_paths: Iterable[str | os.PathLike] = (),
        slots: Mapping[str, str | os.PathLike] | None = None,
        name: str | None = None,
        threads: int | None = None,
    ) -> None:
        self.include_paths = tuple(Path(p) for p in include_paths)
        self.slots = dict(slots or {})
        self._drawn: DrawnForms | None = None
        self._drawn_pending: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        stanc = installer.install() / "bin" / "stanc"
        self.source = read_program(stan_file, stanc, include_paths=self.include_paths,
                                   slots=self.slots)
        self.data = _check_data(self.source, data)
        self.name = model_name(name, self.source.path)
        self.threads = threads
        check_evaluation_form(self.source, evaluation_form(self.source), stanc)
        self._library_file = self._compile_evaluation_form()
        self.library = load(self._library_file, self.data)
        unc = self.library.param_unc_num()
        constrained = self.library.param_names()
        self.n = sum(1 for label in constrained if label.split(".")[0] == WEIGHTS)
        if self.n < 1:
            raise contract_error(self.source.path, "weights has no entries: there are no observations")
        self.dim = unc - 1 - self.n
        self.names = [cmdstan_name(label) for label in constrained[: len(constrained) - 1 - self.n]]
        self._executables: dict[str, cmdstanpy.CmdStanModel] = {}
        self._check_contract()

    # -- running ----------------------------------------------------------------

    def model(self, driver: str = "active") -> cmdstanpy.CmdStanModel:
        """The executable of the program as written (compiled once, cached).

        Parameters
        ----------
        driver : {"active", "stanflow"}, default "active"
            As :func:`stanflow.models.compile_model`: ``"stanflow"`` for run
            sets (batch mode).
        """
        if driver not in self._executables:
            self._executables[driver] = compile_model(
                self.source.path, name=self.name, include_paths=self.include_paths,
                slots=self.slots or None, driver=driver,
            )
        return self._executables[driver]

    def stan_data(self, omega: float, weights: np.ndarray | None = None) -> dict[str, Any]:
        """The executable's data at learning rate ``omega`` and ``weights`` (default all 1)."""
        omega = check_omega(omega)
        return {**self.data, OMEGA: omega, WEIGHTS: self.check_weights(weights)}

    def check_weights(self, weights: Any, rows: int | None = None) -> np.ndarray:
        """``weights`` as a finite non-negative array of shape ``(n,)`` (or ``(rows, n)``).

        None means every weight 1.
        """
        shape = (self.n,) if rows is None else (rows, self.n)
        if weights is None:
            return np.ones(shape)
        w = np.asarray(weights, dtype=float)
        if w.shape != shape and not (rows is not None and w.shape == (self.n,)):
            raise ValueError(
                f"weights must have shape {shape} (one per observation), got {w.shape}"
            )
        if not np.all(np.isfinite(w) & (w >= 0)):
            raise ValueError("weights must be finite and non-negative")
        return np.broadcast_to(w, shape).copy()

    # -- the estimate and the sandwich ------------------------------------------

    def estimate(self, *, seed: int = 0) -> Estimate:
        """The empirical risk minimiser ``argmin sum_i loss_i`` (:mod:`stanflow.gibbs.estimate`)."""
        return risk_minimiser(self, seed=seed)

    def estimate_at(self, theta: Any) -> Estimate:
        """A given full-data estimate ``theta`` (shape ``(P,)``) as an :class:`Estimate`."""
        theta = np.asarray(theta, dtype=float).reshape(-1)
        if theta.shape != (len(self.names),) or not np.all(np.isfinite(theta)):
            raise ValueError(
                f"estimate must be finite with {len(self.names)} value(s) "
                f"({', '.join(self.names)}), got {theta.tolist()}"
            )
        u = self.unconstrain(theta[None])[0]
        if not np.all(np.isfinite(u)):
            raise ValueError(
                f"estimate: {theta.tolist()} lies on the boundary of the parameters' "
                "support, where the algorithms cannot work (Stan's unconstrained point "
                "is infinite there); give a point inside it"
            )
        return Estimate(theta, u, float(self.total_loss(u[None])[0]), "given")

    def sandwich(self, estimate: Estimate, bandwidth: Any = None) -> Sandwich:
        """``H`` and ``J`` at the estimate (:mod:`stanflow.gibbs.sandwich`).

        ``bandwidth``: the central-difference steps of ``H`` on the
        unconstrained scale (default the module's rule).
        """
        return sandwich(self, estimate.u, steps=bandwidth)

    # -- parameters and results -------------------------------------------------

    def draws(self, posterior: Any, sample_dims: tuple[str, ...]) -> np.ndarray:
        """The parameters' draws of a posterior Dataset as one array, columns in :attr:`names` order.

        Parameters
        ----------
        posterior : xarray.Dataset
            A ``posterior`` group (cmdstanpy's variables, ArviZ's dims).
        sample_dims : tuple of str
            Its leading dims, kept in order (``("chain", "draw")``).

        Returns
        -------
        ndarray, shape (*sample_dims sizes, len(names))
        """
        columns = []
        for label in self.names:
            base, _, index = label.partition("[")
            values = posterior[base].transpose(*sample_dims, ...)
            if index:
                position = tuple(int(i) - 1 for i in index.rstrip("]").split(","))
                values = values.values[(Ellipsis, *position)]
            columns.append(np.asarray(values))
        return np.stack(columns, axis=-1)

    def unflatten(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """Flat parameter values ``(..., P)`` as arrays by variable, ``{"theta": (..., 2)}``."""
        values = np.asarray(values, dtype=float)
        lead = values.shape[:-1]
        out: dict[str, np.ndarray] = {}
        for base, entries in _by_variable(self.names).items():
            if entries[0][0] == ():
                out[base] = values[..., entries[0][1]]
                continue
            shape = tuple(max(k[d] for k, _ in entries) + 1 for d in range(len(entries[0][0])))
            array = np.zeros(lead + shape)
            for key, column in entries:
                where: tuple[EllipsisType | int, ...] = (Ellipsis, *key)
                array[where] = values[..., column]
            out[base] = array
        return out

    def inits(self, theta: np.ndarray) -> dict[str, Any]:
        """Initial values for cmdstanpy from one flat parameter vector ``theta``."""
        theta = np.asarray(theta, dtype=float).reshape(-1)
        if theta.shape != (len(self.names),):
            raise ValueError(f"theta must have {len(self.names)} values, got {theta.shape}")
        return nest(self.names, theta)

    def result_data(
        self, data: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[str]], dict[str, Any]]:
        """What a NUTS result keeps of the run's data ``data`` (:meth:`stan_data`).

        Returns
        -------
        observed, constant : dict
            The ``observed_data`` (none for a user's program) and
            ``constant_data`` groups (``omega`` and ``weights``).
        dims, coords : dict
            ArviZ dims and coordinates (``weights`` along ``obs``).
        """
        return {}, {OMEGA: data[OMEGA], WEIGHTS: data[WEIGHTS]}, {WEIGHTS: ["obs"]}, {}

    def check_proper_prior(self) -> None:
        """Raise if the prior is known to be improper (a program of the user's: never known)."""

    def data_groups(self) -> dict[str, Any]:
        """Groups of the data for results that are not NUTS runs (paths, WBB draws): none."""
        return {}

    def describe(self) -> dict[str, Any]:
        """What a result records of the program (its attributes)."""
        return {"program": str(self.source.path), "derivatives": "stan (in process)"}

    def __repr__(self) -> str:
        return f"LossProgram({self.source.path.name}, n={self.n}, parameters={self.names})"

    @property
    def drawn(self) -> DrawnForms | None:
        """The form on the observations weights use (:mod:`stanflow.gibbs.drawn`), or None:
        checked against the whole program at the contract's points when first asked for."""
        pending, self._drawn_pending = self._drawn_pending, None
        if pending is not None:
            self._drawn = checked_drawn(self, self._library_file, self.data, self.slices, *pending)
        return self._drawn

    @drawn.setter
    def drawn(self, value: DrawnForms | None) -> None:
        self._drawn_pending = None
        self._drawn = value

    # -- pickled to other processes (Dask workers) ----------------------------

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the loaded libraries and executables, which each process loads."""
        state = {**self.__dict__, "drawn": self.drawn is not None, "_executables": {}}
        del state["library"], state["_drawn"], state["_drawn_pending"]
        if self.slices is not None:
            state["slices"] = (self.slices.layout, self.slices.bounds)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Load the evaluation form again: from the compiled library where this process
        sees it, else compiled here from the program's text (cached by content)."""
        drawn = state.pop("drawn")
        self.__dict__.update(state)
        if not Path(self._library_file).exists():
            self._library_file = self._compile_evaluation_form()
        self.library = load(self._library_file, self.data)
        if self.slices is not None:
            layout, bounds = state["slices"]
            self.slices = ObservationSlices.load(self._library_file, self.data, layout, bounds)
        self.drawn = (DrawnForms(self._library_file, self.data, self.slices)
                      if drawn and self.slices is not None else None)

    def _compile_evaluation_form(self) -> Path:
        with tempfile.TemporaryDirectory(prefix="stanflow-program-") as folder:
            file = Path(folder) / f"{self.name}_evaluation.stan"
            file.write_text(evaluation_form(self.source))
            return compile_library(file, name=f"{self.name}_evaluation")

    # -- the contract, checked when the program is loaded -----------------------

    def _check_contract(self) -> None:
        """Losses finite and the target linear in omega and the weights, at random points;
        then the slices of the data that give the same values."""
        rng = np.random.default_rng(0)
        points = self._finite_points(rng)
        losses = self.losses(points)
        if not np.all(np.isfinite(losses)):
            bad = int(np.argmax(~np.isfinite(losses).all(axis=0)))
            raise contract_error(
                self.source.path, f"the loss of observation {bad + 1} is not finite at "
                f"unconstrained point {points[0].tolist()}"
            )
        prior = self.log_prior(points, jacobian=False)
        weights = rng.uniform(0.5, 1.5, size=(len(points), self.n))
        omega = rng.uniform(0.5, 2.0, size=len(points))
        expected = prior - omega * np.sum(weights * losses, axis=1)
        found = self.log_density(points, omega, weights, jacobian=False)
        scale = np.abs(prior) + omega * np.sum(weights * np.abs(losses), axis=1) + 1.0
        if not np.all(np.abs(found - expected) <= LINEARITY_RTOL * scale):
            raise contract_error(
                self.source.path,
                "the target is not `log prior - omega * sum_i weights[i] * loss_i`: at "
                f"omega = {omega[0]:.3g} and random weights it is {found[0]:.10g}, where the "
                f"losses it weights give {expected[0]:.10g}; the losses and the prior must "
                "not depend on omega or the weights, and each weight must multiply one "
                "observation's loss",
            )
        self._check_generated_losses(points[0], losses[0])
        self.slices = checked_slices(
            self, self._library_file, self.data,
            observation_layout(self.source.code, self.source.weights_size),
            points, prior, losses,
        )
        self._drawn_pending = (points, prior, losses)

    def _finite_points(self, rng: np.random.Generator) -> np.ndarray:
        found: list[np.ndarray] = []
        for _ in range(INIT_TRIES):
            u = rng.uniform(-INIT_RADIUS, INIT_RADIUS, size=(1, self.dim))
            if np.isfinite(self.log_density(u, 1.0, None)[0]):
                found.append(u[0])
                if len(found) == CHECK_POINTS:
                    return np.array(found)
        if found:
            return np.array(found)
        raise contract_error(
            self.source.path, f"the target is not finite at any of {INIT_TRIES} random "
            f"points uniform on (-{INIT_RADIUS:g}, {INIT_RADIUS:g}) in the unconstrained "
            "parameters (where Stan initialises): the losses cannot be read"
        )

    def _check_generated_losses(self, u: np.ndarray, losses: np.ndarray) -> None:
        """A ``log_lik`` or ``loss`` generated quantity must agree with the target's losses."""
        for name, sign in (("log_lik", -1.0), ("loss", 1.0)):
            if name not in self.source.quantities:
                continue
            labels = self.library.param_names(include_tp=True, include_gq=True)
            columns = [i for i, label in enumerate(labels) if label.split(".")[0] == name]
            if len(columns) != self.n:
                raise contract_error(
                    self.source.path, f"the generated quantity `{name}` has {len(columns)} "
                    f"entries but weights has {self.n}: weights must have one entry per "
                    "observation"
                )
            rng = self.library.new_rng(0)
            values = np.asarray(self.library.param_constrain(
                np.concatenate([u, [1.0], np.ones(self.n)]), include_tp=True,
                include_gq=True, rng=rng,
            ))[columns]
            gap = np.abs(sign * values - losses)
            if not np.all(gap <= 1e-8 * (1 + np.abs(losses))):
                i = int(np.argmax(gap))
                raise contract_error(
                    self.source.path, f"the target weights a loss of {losses[i]:.10g} for "
                    f"observation {i + 1}, but the generated quantity {name}[{i + 1}] is "
                    f"{values[i]:.10g} (loss_i = {'-' if sign < 0 else ''}{name}[i])"
                )


def check_omega(omega: Any, name: str = "omega") -> float:
    """A learning rate as a float: a finite number ``>= 0``."""
    if isinstance(omega, bool) or not isinstance(omega, (int, float, np.number)):
        raise TypeError(f"{name} must be a number, got {type(omega).__name__}")
    if not (math.isfinite(omega) and omega >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {omega!r}")
    return float(omega)


def nest(names: list[str], values: np.ndarray) -> dict[str, Any]:
    """Flat values named as cmdstanpy names them (``b[2,1]``) -> ``{"b": nested lists}``."""
    out: dict[str, Any] = {}
    for base, entries in _by_variable(names).items():
        if entries[0][0] == ():
            out[base] = float(values[entries[0][1]])
            continue
        shape = tuple(max(k[d] for k, _ in entries) + 1 for d in range(len(entries[0][0])))
        array = np.zeros(shape)
        for key, column in entries:
            array[key] = values[column]
        out[base] = array.tolist()
    return out


def _by_variable(names: list[str]) -> dict[str, list[tuple[tuple[int, ...], int]]]:
    """``{"b": [((1, 0), column), ...]}``: each variable's zero-based indices and columns."""
    groups: dict[str, list[tuple[tuple[int, ...], int]]] = {}
    for column, label in enumerate(names):
        base, _, index = label.partition("[")
        key = tuple(int(i) - 1 for i in index.rstrip("]").split(",")) if index else ()
        groups.setdefault(base, []).append((key, column))
    return groups


def _check_data(source: ProgramSource, data: Mapping[str, Any] | None) -> dict[str, Any]:
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise TypeError(f"data must be a mapping of the program's data, got {type(data).__name__}")
    given = [name for name in (OMEGA, WEIGHTS) if name in data]
    if given:
        raise contract_error(
            source.path, f"data must not set {', '.join(given)}: stanflow sets the learning "
            "rate and the weights for each run"
        )
    missing = [name for name in source.user_inputs if name not in data]
    if missing:
        raise ContractError(
            f"data: loss program {source.path} needs {', '.join(missing)}, which the data "
            f"do not give (its data block: {', '.join(source.user_inputs)})"
        )
    return {name: data[name] for name in source.user_inputs}
