"""Resumable ADVI: CmdStan's ``variational`` method continued across runs.

stanflow's driver extends ``method=variational`` with a ``checkpoint`` group:
``checkpoint save=FILE`` writes the optimiser's state after the last
iteration (the variational parameters, the squared-gradient history and
iteration count of ADVI's step-size sequence, ``eta`` and the state of the
random number generator) and ``checkpoint load=FILE`` continues from such a
state, skipping initialisation and adaptation. A run of ``n`` iterations
continued for ``m`` more ends in the same state, with the same draws, as one
run of ``n + m`` iterations (unless one of them stops early on
``tol_rel_obj``, whose stopping rule starts afresh with each run); a run that
only saves writes the same draws as CmdStan's ADVI. ``tests/test_advi_e2e.py``
checks both bit for bit.

This is what lets an algorithm change a model's data between stretches of
one optimisation, as the LCVI loop does with its decisions
(:mod:`stanflow.lcvi.loop`). A user's own CmdStan has no such extension;
:func:`supports_checkpoints` tells.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import cmdstanpy
import numpy as np

from stanflow.runs.arguments import check_args, method_tokens, output_tokens
from stanflow.runs.batch import console_tail

PathLike = str | os.PathLike

STATE_FORMAT = "stanflow-advi-state"
_STATE_FIELDS = ("algorithm", "dimension", "iteration", "eta", "elbo", "mu", "scale")


class AdviRunError(RuntimeError):
    """An ADVI run failed; the message ends with the tail of its console.

    Attributes
    ----------
    console : pathlib.Path
        The run's whole console text.
    """

    def __init__(self, message: str, console: Path) -> None:
        super().__init__(message)
        self.console = console


@dataclass(frozen=True, eq=False)
class AdviState:
    """An ADVI state saved by stanflow's driver (``checkpoint save=FILE``).

    Attributes
    ----------
    path : pathlib.Path
        The state file; pass the state as ``resume`` to continue from it.
    algorithm : {"meanfield", "fullrank"}
    iteration : int
        Iterations done so far, over all runs that led to this state.
    eta : float
        The step-size scale, adapted in the first run or given.
    elbo : float or None
        The ELBO at the last evaluation (every ``eval_elbo`` iterations).
    mu : ndarray, shape (D,)
        Mean of the approximation on the unconstrained scale.
    scale : ndarray
        ``omega`` (log standard deviations, shape (D,)) for mean-field, the
        Cholesky factor ``L`` (D, D) for full-rank.
    """

    path: Path
    algorithm: str
    iteration: int
    eta: float
    elbo: float | None
    mu: np.ndarray
    scale: np.ndarray

    def draws(self, base: np.ndarray) -> np.ndarray:
        """Draws of the approximation on the unconstrained scale.

        Parameters
        ----------
        base : array_like, shape (T, D)
            Standard normal base samples; the same base samples give draws
            that move smoothly with the state (common random numbers).

        Returns
        -------
        ndarray, shape (T, D)
            ``mu + exp(omega) * base`` (mean-field) or ``mu + base @ L.T``.
        """
        base = np.asarray(base, dtype=float)
        if base.ndim != 2 or base.shape[1] != self.mu.size:
            raise ValueError(
                f"base must have shape (T, {self.mu.size}), got {base.shape}"
            )
        if self.algorithm == "meanfield":
            return self.mu + np.exp(self.scale) * base
        return self.mu + base @ self.scale.T

    def entropy(self) -> float:
        """The entropy of the normal approximation (on the unconstrained scale)."""
        log_sd = (
            self.scale
            if self.algorithm == "meanfield"
            else np.log(np.abs(np.diag(self.scale)))
        )
        return float(np.sum(log_sd) + self.mu.size * (1 + np.log(2 * np.pi)) / 2)

    @classmethod
    def read(cls, path: PathLike) -> AdviState:
        """Read a state file; a file of another format is a ``ValueError``."""
        path = Path(path)
        state = json.loads(path.read_text())
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"{path} is not a {STATE_FORMAT} file")
        missing = sorted(set(_STATE_FIELDS) - set(state))
        if missing:
            raise ValueError(f"{path}: the state lacks the fields {missing}")
        dim = int(state["dimension"])
        scale = np.asarray(state["scale"], dtype=float)
        if state["algorithm"] == "fullrank":
            scale = scale.reshape(dim, dim)
        return cls(
            path=path,
            algorithm=state["algorithm"],
            iteration=int(state["iteration"]),
            eta=float(state["eta"]),
            elbo=None if state["elbo"] is None else float(state["elbo"]),
            mu=np.asarray(state["mu"], dtype=float),
            scale=scale,
        )


def supports_checkpoints(exe: PathLike) -> bool:
    """Whether the model executable ``exe`` has stanflow's ADVI checkpoints.

    Reads ``exe help-all`` once per executable file (and modification time):
    stanflow's driver lists the ``checkpoint`` group, CmdStan does not.
    """
    path = Path(exe).resolve()
    return _lists_checkpoint(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _lists_checkpoint(exe: str, mtime_ns: int) -> bool:
    result = subprocess.run(
        [exe, "help-all"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return "checkpoint" in result.stdout and "stanflow extension" in result.stdout


def run_advi(
    model: cmdstanpy.CmdStanModel,
    data: Mapping[str, Any],
    out_dir: PathLike,
    name: str,
    *,
    seed: int,
    args: Mapping[str, Any] | None = None,
    resume: AdviState | None = None,
    inits: Mapping[str, Any] | None = None,
) -> tuple[cmdstanpy.CmdStanVB, AdviState]:
    """Run ADVI, saving its state; continue from ``resume`` if given.

    Parameters
    ----------
    model : cmdstanpy.CmdStanModel
        Compiled with stanflow's toolchain (:func:`supports_checkpoints`).
    data : mapping
        The model's data (it may differ from the data of the run that
        saved ``resume``, as long as the parameters are the same).
    out_dir : path
        Existing folder for this run's files ``<name>.csv``,
        ``<name>-state.json``, ``<name>-data.json``, ``<name>-console.txt``.
    name : str
        Stem of the files.
    seed : int
        Seeds initialisation and the run; ignored when resuming, since the
        random number generator continues from the saved state.
    args : mapping, optional
        CmdStan's ``variational`` arguments by CmdStan's names
        (``{"iter": 2000, "grad_samples": 10, "adapt.engaged": False,
        "eta": 0.1, "output_samples": 1000, "sig_figs": 18}``), checked by
        :func:`stanflow.runs.arguments.check_args`. When resuming, ``iter``
        counts the iterations of this run (on top of the state's), ``eta``
        and the adaptation are the state's (giving them is an error), and
        ``algorithm`` must be the state's. The stopping rule on
        ``tol_rel_obj`` starts afresh with each run.
    resume : AdviState, optional
    inits : mapping, optional
        Initial values (the mean of the first approximation); not with
        ``resume``.

    Returns
    -------
    fit : cmdstanpy.CmdStanVB
    state : AdviState
        The state after the last iteration.

    Raises
    ------
    AdviRunError
        The run failed; the message carries the end of its console.
    """
    checked = check_args("variational", dict(args or {}))
    if resume is not None:
        if inits is not None:
            raise ValueError("inits: a resumed run starts from its state, not inits")
        fixed = [key for key in checked if key == "eta" or key.startswith("adapt.")]
        if fixed:
            raise ValueError(
                f"{fixed[0]}: a resumed run uses the state's eta "
                f"({resume.eta:g}) and does not adapt"
            )
        if checked.get("algorithm", "meanfield") != resume.algorithm:
            raise ValueError(
                f"algorithm: the state {resume.path} is {resume.algorithm!r}, "
                f"got {checked.get('algorithm', 'meanfield')!r}"
            )
    exe = model.exe_file
    if exe is None:
        raise ValueError("model: it has no executable (compile it with stanflow's toolchain)")
    if not supports_checkpoints(exe):
        raise RuntimeError(
            f"{exe} has no ADVI checkpoints: resumable ADVI needs "
            "stanflow's CmdStan-compatible driver (stanflow.toolchain); a CmdStan "
            "of your own ($CMDSTAN or ~/.cmdstan) has no such extension"
        )
    folder = Path(out_dir)
    files = {
        key: folder / f"{name}{suffix}"
        for key, suffix in [
            ("csv", ".csv"),
            ("state", "-state.json"),
            ("data", "-data.json"),
            ("inits", "-inits.json"),
            ("console", "-console.txt"),
        ]
    }
    cmdstanpy.write_stan_json(str(files["data"]), dict(data))
    tokens = [str(exe), *method_tokens("variational", checked)]
    tokens += ["checkpoint", f"save={files['state']}"]
    if resume is not None:
        tokens += [f"load={resume.path}"]
    tokens += ["data", f"file={files['data']}"]
    if inits is not None:
        cmdstanpy.write_stan_json(str(files["inits"]), dict(inits))
        tokens += [f"init={files['inits']}"]
    tokens += ["random", f"seed={int(seed)}", "output", f"file={files['csv']}"]
    tokens += output_tokens(checked)
    with files["console"].open("w") as console:
        code = subprocess.run(
            tokens,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    if code != 0:
        raise AdviRunError(
            f"ADVI run {name} failed with exit code {code}"
            + console_tail(files["console"]),
            files["console"],
        )
    # method="variational" makes it a CmdStanVB (or raises).
    fit = cast(cmdstanpy.CmdStanVB, cmdstanpy.from_csv(str(files["csv"]), method="variational"))
    return fit, AdviState.read(files["state"])
