"""Log densities and gradients of a loaded model at many points at once.

One call evaluates every row of an ``(n, D)`` array of unconstrained points
through the model library's ``stanflow_log_density_batch``: a loop in C++ whose
rows are split into contiguous blocks over threads (each with its own Stan
autodiff stack), inside one ctypes call that releases the GIL. A Python loop
over rows costs a few microseconds of interpreter time per row under the GIL,
as much as a small model's whole gradient, and its threads could not run at
once; the C++ loop has neither cost.
"""

from __future__ import annotations

import ctypes
import os

import bridgestan
import numpy as np

from stanflow.validation import check_int

MIN_ROWS_PER_THREAD = 32
"""Starting a thread costs tens of microseconds: fewer rows than this per
thread would spend more on threads than they save..."""
MIN_VALUES_PER_THREAD = 2**14
"""...unless the rows are wide (a loss program's rows carry a weight per
observation, and its target sums a loss per observation): a thread is worth
starting for this many values of its rows."""


def default_threads() -> int:
    """The number of cores this process may run on (``os.sched_getaffinity``).

    The work is CPU-bound and each thread evaluates whole rows, so one thread
    per available core is the most that helps.
    """
    return len(os.sched_getaffinity(0))


def log_density_rows(
    model: bridgestan.StanModel,
    theta_unc: np.ndarray,
    *,
    propto: bool = True,
    jacobian: bool = True,
    threads: int | None = None,
    reject_as_neg_inf: bool = False,
    check_finite: bool = True,
) -> np.ndarray:
    """Log density of the model at each row of ``theta_unc``.

    Parameters
    ----------
    model : bridgestan.StanModel
        A model from :func:`stanflow.models.load`.
    theta_unc : array_like, shape (n, D)
        Unconstrained points, ``D = model.param_unc_num()``; finite.
    propto : bool, default True
        Drop constant terms of ``~`` statements, as Stan's samplers do.
    jacobian : bool, default True
        Include the log Jacobian of the constraining transforms.
    threads : int, optional
        Threads to split the rows over; default :func:`default_threads`,
        lowered so that each thread has at least :data:`MIN_ROWS_PER_THREAD` rows
        or :data:`MIN_VALUES_PER_THREAD` values.
    reject_as_neg_inf : bool, default False
        A row whose evaluation the program rejects (``reject``, a failed
        argument check) gets ``-inf``, as Stan's samplers treat it, instead of
        raising.
    check_finite : bool, default True
        Check that every value is finite. Pass False only for rows whose
        values the caller has checked: it saves a pass over them, which counts
        when rows are wide (a weight per observation).

    Returns
    -------
    numpy.ndarray, shape (n,)

    Raises
    ------
    ValueError
        For a wrong shape or non-finite points (naming the rows), or when the
        program rejects a row and ``reject_as_neg_inf`` is False (naming the
        row and Stan's message).
    """
    points = _check_points(model, theta_unc, check_finite)
    lp = np.empty(points.shape[0])
    _evaluate(model, points, lp, None, propto, jacobian, threads, reject_as_neg_inf)
    return lp


def log_density_gradient_rows(
    model: bridgestan.StanModel,
    theta_unc: np.ndarray,
    *,
    propto: bool = True,
    jacobian: bool = True,
    threads: int | None = None,
    reject_as_neg_inf: bool = False,
    check_finite: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Log density and its gradient at each row of ``theta_unc``.

    Parameters are those of :func:`log_density_rows`; a rejected row's
    gradient is NaN when ``reject_as_neg_inf`` is True.

    Returns
    -------
    log_density : numpy.ndarray, shape (n,)
    gradient : numpy.ndarray, shape (n, D)
    """
    points = _check_points(model, theta_unc, check_finite)
    lp = np.empty(points.shape[0])
    grad = np.empty_like(points)
    _evaluate(model, points, lp, grad, propto, jacobian, threads, reject_as_neg_inf)
    return lp, grad


def _check_points(
    model: bridgestan.StanModel, theta_unc: np.ndarray, check_finite: bool = True
) -> np.ndarray:
    if not isinstance(model, bridgestan.StanModel):
        raise TypeError(
            f"model must be a bridgestan.StanModel (stanflow.models.load), "
            f"got {type(model).__name__}"
        )
    points = np.ascontiguousarray(theta_unc, dtype=np.float64)
    dim = model.param_unc_num()
    if points.ndim != 2 or points.shape[1] != dim:
        raise ValueError(
            f"theta_unc must have shape (n, {dim}) for {model.name()} "
            f"({dim} unconstrained parameters), got shape {points.shape}"
        )
    if not check_finite:
        return points
    bad = np.flatnonzero(~np.isfinite(points).all(axis=1))
    if bad.size:
        raise ValueError(
            f"theta_unc: {bad.size} row(s) are not finite, first rows {bad[:5].tolist()}"
        )
    return points


def _evaluate(
    model: bridgestan.StanModel,
    points: np.ndarray,
    lp: np.ndarray,
    grad: np.ndarray | None,
    propto: bool,
    jacobian: bool,
    threads: int | None,
    reject_as_neg_inf: bool,
) -> None:
    n = points.shape[0]
    if threads is None:
        threads = default_threads()
    threads = check_int(threads, "threads")
    worth = max(n // MIN_ROWS_PER_THREAD, points.size // MIN_VALUES_PER_THREAD)
    threads = max(1, min(threads, n, worth))
    batch = _batch_function(model)
    if batch is None:
        _evaluate_in_python(model, points, lp, grad, propto, jacobian, reject_as_neg_inf)
        return
    err = ctypes.c_char_p()
    code = batch(
        model.model, propto, jacobian, n,
        points.ctypes.data, lp.ctypes.data,
        None if grad is None else grad.ctypes.data,
        threads, reject_as_neg_inf, ctypes.byref(err),
    )
    if code != 0:
        raise ValueError(f"{model.name()}: {_error_message(model, err)}")


def _error_message(model: bridgestan.StanModel, err: ctypes.c_char_p) -> str:
    """The library's error message (freed), or "unknown error"."""
    if not err:
        return "unknown error"
    message = ctypes.string_at(err).decode("utf-8", "replace")
    model.stanlib.bs_free_error_msg(err)
    return message


def _batch_function(model: bridgestan.StanModel):
    """stanflow's batch entry point of the library, or None for other libraries."""
    try:
        function = model.stanlib.stanflow_log_density_batch
    except AttributeError:
        return None
    function.restype = ctypes.c_int
    function.argtypes = [
        ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool, ctypes.c_int,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_int, ctypes.c_bool, ctypes.POINTER(ctypes.c_char_p),
    ]
    return function


def _evaluate_in_python(
    model: bridgestan.StanModel,
    points: np.ndarray,
    lp: np.ndarray,
    grad: np.ndarray | None,
    propto: bool,
    jacobian: bool,
    reject_as_neg_inf: bool,
) -> None:
    """Row by row through bridgestan, for a library built by BridgeStan itself."""
    for row, point in enumerate(points):
        try:
            if grad is None:
                lp[row] = model.log_density(point, propto=propto, jacobian=jacobian)
            else:
                lp[row], grad[row] = model.log_density_gradient(
                    point, propto=propto, jacobian=jacobian
                )
        except RuntimeError as err:
            if not reject_as_neg_inf:
                raise ValueError(f"{model.name()}: row {row}: {err}") from None
            lp[row] = -np.inf
            if grad is not None:
                grad[row] = np.nan


def constrain_rows(model: bridgestan.StanModel, theta_unc: np.ndarray) -> np.ndarray:
    """The constrained parameters (no transformed parameters or generated quantities)
    at each row of ``theta_unc``, shape ``(n, model.param_num())``.

    One C call per row with raw pointers: bridgestan's own ``param_constrain``
    checks its arguments in Python on every call, which costs more than the
    transform itself when there are thousands of rows.

    Raises
    ------
    ValueError
        For a wrong shape, or when the program's transform fails at a row.
    """
    points = _check_points(model, theta_unc)
    out = np.empty((points.shape[0], model.param_num()))
    _rowwise(model, "bs_param_constrain", points, out, constrain=True)
    return out


def unconstrain_rows(model: bridgestan.StanModel, theta: np.ndarray) -> np.ndarray:
    """The unconstrained point of each row of constrained parameter values ``theta``
    (shape ``(n, model.param_num())``), shape ``(n, model.param_unc_num())``.

    Raises
    ------
    ValueError
        For a wrong shape, or a row outside the parameters' support (Stan's message).
    """
    values = np.ascontiguousarray(theta, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != model.param_num():
        raise ValueError(
            f"theta must have shape (n, {model.param_num()}) for {model.name()}, "
            f"got shape {values.shape}"
        )
    out = np.empty((values.shape[0], model.param_unc_num()))
    _rowwise(model, "bs_param_unconstrain", values, out, constrain=False)
    return out


def _rowwise(model: bridgestan.StanModel, name: str, points: np.ndarray, out: np.ndarray,
             constrain: bool) -> None:
    address = ctypes.cast(getattr(model.stanlib, name), ctypes.c_void_p).value
    assert address is not None  # a function the library exports
    if constrain:
        function = ctypes.CFUNCTYPE(
            ctypes.c_int, ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool, ctypes.c_void_p,
            ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p))(address)
    else:
        function = ctypes.CFUNCTYPE(
            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_char_p))(address)
    err = ctypes.c_char_p()
    source, target = points.ctypes.data, out.ctypes.data
    step_in, step_out = points.strides[0], out.strides[0]
    for row in range(points.shape[0]):
        args = (source + row * step_in, target + row * step_out)
        code = (function(model.model, False, False, *args, None, ctypes.byref(err))
                if constrain else function(model.model, *args, ctypes.byref(err)))
        if code != 0:
            raise ValueError(f"{model.name()}: row {row}: {_error_message(model, err)}")
