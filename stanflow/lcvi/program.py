"""An LCVI program bound to its data: the one object every LCVI procedure takes.

:class:`LcviProgram` is a Stan program meeting the LCVI-program contract
(:mod:`stanflow.lcvi.contract`) together with its data and the number of its
decisions. Its loss is bound per run: :meth:`LcviProgram.bind` compiles (once
per content, cached) the two forms of the program with the loss in the slot
``loss.stanfunctions`` and returns an :class:`LcviModel`:

- the **executable** of the program as written, for ADVI (stanflow's resumable
  driver) and NUTS through cmdstanpy: the decisions, base samples and
  settings are data, so one executable serves every run;
- the **evaluation form** loaded in process (bridgestan), with ``lcvi_z``,
  ``lcvi_u``, ``lcvi_h`` and ``lcvi`` as its last parameters: at any draws of
  the parameters and any base samples it gives the outcomes (the gradient in
  the probe, :meth:`LcviModel.outcomes`, :meth:`LcviModel.normal_parts`), and
  the gradient of ``log p + weight * U`` in the parameters and the decisions
  for the paper's joint optimisation.

What the program is, is read from it when it is bound, before any
optimisation: which form of ``lcvi_utility`` it calls (normal outcomes, whose
noise stanflow integrates out exactly, or outcomes of any form), whether its
outcomes use the uniform base samples, and that it calls the utility term
exactly once, with outcomes of the right size that are finite at random
points.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import bridgestan
import cmdstanpy
import numpy as np

from stanflow.lcvi.contract import (
    DECLARATIONS,
    LcviSource,
    contract_error,
    evaluation_form,
    read_lcvi_program,
)
from stanflow.lcvi.utility import ESTIMATORS
from stanflow.lcvi.utility_transform import UTILITIES
from stanflow.losses import BoundLoss
from stanflow.models import (
    compile_library,
    compile_model,
    constrain_rows,
    load,
    log_density_gradient_rows,
)
from stanflow.models.source import cmdstan_name, model_name
from stanflow.models.templates import STAN_DIR
from stanflow.signatures import LOSS, check_signature
from stanflow.toolchain import installer
from stanflow.validation import check_int

HEADER = 9
"""Entries of the settings vector ``lcvi`` before its probe and loss parameters."""
FORMS = ("normal", "general")
"""The two forms of ``lcvi_utility``: normal outcomes (loc, sd), or outcomes of any form."""
ROW_BUDGET = 2**21
"""Doubles per in-process call: bounds the memory of a batch of rows."""
CHECK_POINTS = 3
"""Random points at which the program is checked when it is bound."""
INIT_TRIES = 100


class LcviProgram:
    """A Stan program meeting the LCVI-program contract, bound to its data.

    Parameters
    ----------
    stan_file : str or os.PathLike
        The program (``.stan``), with ``#include lcvi.stanfunctions`` in its
        functions, ``#include lcvi_data.stan`` in its data and the utility
        term ``target += lcvi_utility(...)`` in its model block
        (``docs/your-own-model.md``, "LCVI").
    data : mapping, optional
        Every variable of its data block except stanflow's (``lcvi_*``).
    y : array_like, shape (N,), optional
        The observed outcomes the decisions are for (held-out values, or the
        data themselves): the loops' empirical risk is ``mean_n l(y_n, h_n)``.
        Sets ``N``.
    n_decisions : int, optional
        ``N`` without observed outcomes (risks are then NaN).
    include_paths : iterable of path, optional
        Folders for the program's ``#include`` lines (its own folder and the
        shipped ``stan/`` folder are always searched).
    name : str, optional
        The model's name in results and in the compile cache; default the
        file's stem.
    dims : mapping, optional
        ``dims`` of its variables in the results (ArviZ's).
    threads : int, optional
        Threads of the in-process calls.

    Raises
    ------
    ContractError
        Naming the program and the missing piece (:mod:`stanflow.lcvi.contract`),
        or data that lack a variable or set one of stanflow's.
    ValueError
        Neither or both of ``y`` and ``n_decisions``, or ``y`` not a finite vector.
    """

    def __init__(
        self,
        stan_file: str | os.PathLike,
        data: Mapping[str, Any] | None = None,
        *,
        y: Any = None,
        n_decisions: int | None = None,
        include_paths: Iterable[str | os.PathLike] = (),
        name: str | None = None,
        dims: Mapping[str, list[str]] | None = None,
        threads: int | None = None,
    ) -> None:
        # stanflow's LCVI includes (lcvi.stanfunctions, lcvi_data.stan) after the user's
        self.include_paths = (*(Path(p) for p in include_paths), STAN_DIR / "lcvi")
        self.stanc = installer.install() / "bin" / "stanc"
        self.source: LcviSource = read_lcvi_program(
            stan_file, self.stanc, include_paths=self.include_paths
        )
        self.data = _check_data(self.source, data)
        self.y, self.n = _decisions(y, n_decisions)
        self.name = model_name(name, self.source.path)
        self.dims = dict(dims or {})
        self.threads = threads
        self._bound: dict[tuple[Path, tuple[float, ...]], LcviModel] = {}

    def bind(self, loss: BoundLoss) -> LcviModel:
        """The program compiled with ``loss`` in its slot, checked (cached per loss file and parameters).

        Raises
        ------
        stanflow.models.CompileError
            If the loss file does not define the loss slot's signature (checked
            by stanc before anything compiles); the message names the file and
            the signature.
        """
        key = (Path(loss.stan_file).resolve(), tuple(float(v) for v in loss.params))
        if key not in self._bound:
            self._bound[key] = LcviModel(self, loss)
        return self._bound[key]

    def __repr__(self) -> str:
        return f"LcviProgram({str(self.source.path)!r}, N={self.n})"


class LcviModel:
    """An :class:`LcviProgram` compiled with one loss, its form read and checked.

    Attributes
    ----------
    program : LcviProgram
    loss : BoundLoss
    form : {"normal", "general"}
        Which ``lcvi_utility`` the program calls.
    uses_uniform : bool
        Whether its outcomes depend on ``lcvi_u`` (general form only).
    dim : int
        Unconstrained parameters ``D`` of the program as written.
    names : list of str
        Its parameters as cmdstanpy names them.
    """

    def __init__(self, program: LcviProgram, loss: BoundLoss) -> None:
        self.program, self.loss = program, loss
        check_signature(loss.stan_file, LOSS)
        slots = {LOSS.include: Path(loss.stan_file)}
        source = read_lcvi_program(
            program.source.path, program.stanc, include_paths=program.include_paths, slots=slots
        )
        code = evaluation_form(source, program.stanc)
        with tempfile.TemporaryDirectory(prefix="stanflow-lcvi-program-") as folder:
            file = Path(folder) / f"{program.name}_evaluation.stan"
            file.write_text(code)
            self.library = compile_library(file, name=f"{program.name}_evaluation")
        self._slots = slots
        self._executable: cmdstanpy.CmdStanModel | None = None
        self._loaded: dict[tuple[int, int], bridgestan.StanModel] = {}
        first = self.evaluator(1, 0)
        width = first.param_unc_num()
        moved = _moved_count(program.n, 1, HEADER + len(loss.params))
        self.dim = width - moved
        labels = first.param_names()
        self.names = [cmdstan_name(label) for label in labels[: len(labels) - moved]]
        self.form, self.uses_uniform = self._read_form()

    # -- the program's data ---------------------------------------------------------

    def settings(
        self,
        weight: float,
        kind: str,
        scale: float,
        estimator: str,
        S: int,
        probe: int = 0,
    ) -> np.ndarray:
        """The settings vector ``lcvi`` (``stan/lcvi/lcvi.stanfunctions``), probe of ``probe`` zeros."""
        header = [float(weight), UTILITIES.index(kind) + 1.0, float(scale),
                  ESTIMATORS.index(estimator) + 1.0, 1.0 if probe else 0.0, 0.0, 0.0,
                  float(S), float(self.program.n)]
        return np.concatenate([header, np.zeros(probe), np.asarray(self.loss.params, float)])

    def stan_data(
        self,
        h: np.ndarray,
        z: np.ndarray,
        u: np.ndarray,
        settings: np.ndarray,
    ) -> dict[str, Any]:
        """The executable's data: the user's and stanflow's (decisions, base samples, settings).

        Raises
        ------
        ValueError
            Decisions ``h`` not finite or not of shape ``(N,)``, base samples
            not of shape ``(S, N)``.
        """
        N = self.program.n
        h, z, u = (np.asarray(a, dtype=float) for a in (h, z, u))
        if h.shape != (N,):
            raise ValueError(f"h (decisions) must have shape ({N},), got {h.shape}")
        if not np.all(np.isfinite(h)):
            raise ValueError("h (decisions) must be finite")
        if z.ndim != 2 or z.shape[1] != N or z.shape[0] == 0 or u.shape != z.shape:
            raise ValueError(
                f"base samples must have shape (S, {N}) with S >= 1, got {z.shape}, {u.shape}"
            )
        S = z.shape[0]
        return {**self.program.data, "lcvi_S": S, "lcvi_N": self.program.n, "lcvi_z": z,
                "lcvi_u": u, "lcvi_h": np.asarray(h, float), "lcvi_size": settings.size,
                "lcvi": settings}

    def executable(self) -> cmdstanpy.CmdStanModel:
        """The program as written with the loss, for ADVI and NUTS (stanflow's driver)."""
        if self._executable is None:
            self._executable = compile_model(
                self.program.source.path, name=self.program.name,
                include_paths=self.program.include_paths, slots=self._slots, driver="stanflow",
            )
        return self._executable

    def evaluator(self, S: int, probe: int) -> bridgestan.StanModel:
        """The evaluation form loaded with ``lcvi_S = S`` and a probe of ``probe`` values."""
        size = HEADER + probe + len(self.loss.params)
        key = (int(S), size)
        if key not in self._loaded:
            data = {**self.program.data, "lcvi_S": int(S), "lcvi_N": self.program.n,
                    "lcvi_size": size}
            try:
                self._loaded[key] = load(self.library, data)
            except (RuntimeError, ValueError) as err:
                raise ValueError(
                    f"LCVI program {self.program.source.path}: Stan rejects the data: {err}"
                ) from None
        return self._loaded[key]

    def layout(self, S: int, size: int) -> dict[str, slice]:
        """Slices of an evaluation row: ``theta``, ``z``, ``u``, ``h``, ``lcvi``."""
        D, N = self.dim, self.program.n
        ends = np.cumsum([D, S * N, S * N, N, size])
        starts = np.concatenate([[0], ends[:-1]])
        return {k: slice(int(a), int(b)) for k, a, b in
                zip(("theta", "z", "u", "h", "lcvi"), starts, ends, strict=True)}

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """The parameters as declared at draws ``theta`` (T, D), by name, each (T, *shape)."""
        theta = _rows(theta, self.dim)
        model = self.evaluator(1, 0)
        rows = np.zeros((theta.shape[0], model.param_unc_num()))
        rows[:, : self.dim] = theta
        values = constrain_rows(model, rows)[:, : len(self.names)]
        return _by_name(self.names, values)

    # -- outcomes ----------------------------------------------------------------------

    def normal_parts(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``loc`` and ``sd`` (each (T, N)) of normal outcomes at draws ``theta`` (T, D)."""
        if self.form != "normal":
            raise ValueError(f"{self._label}: its outcomes are not normal ({self.form} form)")
        N = self.program.n
        theta = _rows(theta, self.dim)
        zeros = np.zeros((theta.shape[0], 1, N))
        probe = self._probe(theta, zeros, zeros + 0.5, 2 * N)
        return probe[:, :N], probe[:, N:]

    def outcomes(self, theta: np.ndarray, z: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Outcomes (T, S, N) at draws ``theta`` (T, D) from base samples (T or 1, S, N)."""
        theta = _rows(theta, self.dim)
        z = np.broadcast_to(z, (theta.shape[0], *np.shape(z)[-2:]))
        u = np.broadcast_to(u, z.shape)
        S, N = z.shape[1:]
        if self.form == "normal":
            loc, sd = self.normal_parts(theta)
            return loc[:, None, :] + sd[:, None, :] * z
        flat = self._probe(theta, z, u, S * N)
        return flat.reshape(-1, N, S).transpose(0, 2, 1)  # Stan: column-major

    def _probe(self, theta: np.ndarray, z: np.ndarray, u: np.ndarray, probe: int) -> np.ndarray:
        """The gradient in the probe at each row: the outcomes (or loc and sd)."""
        S = z.shape[1]
        model = self.evaluator(S, probe)
        settings = self.settings(0.0, "linear", 1.0, "linearised", S, probe)
        parts = self.layout(S, settings.size)
        width = parts["lcvi"].stop
        out = np.empty((theta.shape[0], probe))
        step = max(1, ROW_BUDGET // width)
        at = parts["lcvi"].start + HEADER
        for start in range(0, theta.shape[0], step):
            block = slice(start, min(start + step, theta.shape[0]))
            rows = np.zeros((block.stop - block.start, width))
            rows[:, parts["theta"]] = theta[block]
            rows[:, parts["z"]] = z[block].transpose(0, 2, 1).reshape(rows.shape[0], -1)
            rows[:, parts["u"]] = u[block].transpose(0, 2, 1).reshape(rows.shape[0], -1)
            rows[:, parts["lcvi"]] = settings
            try:
                _, grad = log_density_gradient_rows(model, rows, threads=self.program.threads)
            except ValueError as err:
                raise ValueError(f"{self._label}: reading its outcomes failed: {err}") from None
            out[block] = grad[:, at : at + probe]
        if not np.all(np.isfinite(out)):
            raise ValueError(f"{self._label}: its outcomes are not finite at some draws")
        return out

    @property
    def _label(self) -> str:
        return f"LCVI program {self.program.source.path}"

    # -- the checks when bound --------------------------------------------------------

    def _read_form(self) -> tuple[str, bool]:
        """Which ``lcvi_utility`` the program calls, and whether it uses ``lcvi_u``.

        At random points (Stan's initialisation), before any optimisation:
        the utility term is called once, ``lcvi_h`` enters the target only
        through it, and the outcomes are finite (and ``sd`` positive).
        """
        path, N, S = self.program.source.path, self.program.n, 2
        model = self.evaluator(S, 0)
        settings = self.settings(0.0, "linear", 1.0, "linearised", S)
        parts = self.layout(S, settings.size)
        rng = np.random.default_rng(20191204)
        found, message = [], ""
        for _ in range(INIT_TRIES):
            row = np.zeros(parts["lcvi"].stop)
            row[parts["theta"]] = rng.uniform(-2, 2, self.dim)
            row[parts["z"]] = rng.standard_normal(S * N)
            row[parts["u"]] = rng.uniform(size=S * N)
            row[parts["h"]] = rng.standard_normal(N)
            row[parts["lcvi"]] = settings
            try:
                lp, grad = model.log_density_gradient(row, propto=False, jacobian=True)
            except RuntimeError as err:
                message = str(err)
                continue
            if np.isfinite(lp) and np.all(np.isfinite(grad)):
                found.append((row, grad))
                if len(found) == CHECK_POINTS:
                    break
        if not found:
            raise contract_error(
                path, f"the target is not finite at any of {INIT_TRIES} random points"
                + (f"; Stan says: {message}" if message else "")
            )
        start = parts["lcvi"].start
        calls = {(round(g[start + 5]), round(g[start + 6])) for _, g in found}
        if calls == {(1, 0)}:
            form = "general"
        elif calls == {(0, 1)}:
            form = "normal"
        elif calls == {(0, 0)}:
            raise contract_error(path, "the model block never reaches lcvi_utility: call it "
                                 "once, unconditionally")
        else:
            raise contract_error(path, f"the model block calls lcvi_utility {sorted(calls)} "
                                 "(general, normal) times: call it exactly once")
        if any(np.any(g[parts["h"]] != 0) for _, g in found):
            raise contract_error(path, "the target depends on lcvi_h outside lcvi_utility: pass "
                                 "the decisions to lcvi_utility only")
        self.form = form
        theta = np.stack([r[parts["theta"]] for r, _ in found])
        z = np.stack([r[parts["z"]].reshape(N, S).T for r, _ in found])
        u = np.stack([r[parts["u"]].reshape(N, S).T for r, _ in found])
        if form == "normal":
            _, sd = self.normal_parts(theta)
            if np.any(sd <= 0):
                raise contract_error(path, "the sd of its normal outcomes is not positive")
            return form, False
        uses_uniform = not np.array_equal(self.outcomes(theta, z, u),
                                          self.outcomes(theta, z, 1 - u))
        return form, uses_uniform


def _moved_count(N: int, S: int, size: int) -> int:
    """Unconstrained values of stanflow's moved variables (``lcvi_z`` .. ``lcvi``)."""
    return 2 * S * N + N + size


def _by_name(names: list[str], values: np.ndarray) -> dict[str, np.ndarray]:
    """Flat columns named ``theta[1,2]`` (Stan's column-major order) as arrays by name."""
    columns: dict[str, list[tuple[tuple[int, ...], int]]] = {}
    for j, name in enumerate(names):
        base, _, index = name.partition("[")
        key = tuple(int(i) - 1 for i in index.rstrip("]").split(",")) if index else ()
        columns.setdefault(base, []).append((key, j))
    out = {}
    for base, entries in columns.items():
        shape = tuple(max(k[d] for k, _ in entries) + 1 for d in range(len(entries[0][0])))
        array = np.empty((values.shape[0], *shape))
        for key, j in entries:
            where: tuple[slice | int, ...] = (slice(None), *key)
            array[where] = values[:, j]
        out[base] = array
    return out


def _rows(theta: np.ndarray, D: int) -> np.ndarray:
    theta = np.atleast_2d(np.asarray(theta, dtype=float))
    if theta.ndim != 2 or theta.shape[1] != D:
        raise ValueError(f"draws must have shape (T, {D}), got {theta.shape}")
    return theta


def _check_data(source: LcviSource, data: Mapping[str, Any] | None) -> dict[str, Any]:
    data = dict(data or {})
    ours = sorted(set(data) & set(DECLARATIONS))
    if ours:
        raise contract_error(source.path, f"the data set stanflow's variables {ours}: "
                             "leave them out, stanflow sets them")
    missing = [name for name in source.user_inputs if name not in data]
    if missing:
        raise contract_error(source.path, f"the data lack {missing}")
    unknown = sorted(set(data) - set(source.inputs))
    if unknown:
        raise contract_error(source.path, f"the data have variables the program does not "
                             f"declare: {unknown}")
    return data


def _decisions(y: Any, n_decisions: int | None) -> tuple[np.ndarray | None, int]:
    """The observed outcomes (or None) and the number of decisions."""
    if (y is None) == (n_decisions is None):
        raise ValueError("give y (the observed outcomes of the decisions) or n_decisions, "
                         "one of them")
    if y is None:
        return None, check_int(n_decisions, "n_decisions")
    values = np.asarray(y, dtype=float)
    if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError(f"y must be a non-empty finite vector, got shape {values.shape}")
    return values, values.size
