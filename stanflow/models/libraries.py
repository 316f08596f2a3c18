"""Stan programs -> model libraries for in-process evaluation through ``bridgestan``.

A *model library* is a shared object exporting BridgeStan's C API, which the
``bridgestan`` package loads with ctypes: log densities, gradients, Hessians and
transforms of a Stan program called from Python without launching a process.
BridgeStan's own C++ is not on PyPI, so stanflow implements that API itself
(``stanflow/toolchain/cmdstan/src/bridge/``) and links it with the program in
stanflow's own installation, whatever CmdStan cmdstanpy uses: a user's CmdStan
has no such sources. Libraries live in the same content-addressed cache as the
executables (see ``docs/inprocess.md``).
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import bridgestan
from bridgestan.__version import __version_info__

from stanflow.models.cache import (
    CompileError,
    PathLike,
    cache_key,
    check_name,
    check_options,
    ensure_entry,
)
from stanflow.models.templates import origin_note, render_with_origins
from stanflow.toolchain import installer
from stanflow.toolchain.discovery import read_cmdstan_version

_log = logging.getLogger(__name__)

LIBRARY_SUFFIX = "_model.so"
"""A library for program ``<name>.stan`` is ``<name>_model.so``, as BridgeStan names it."""


def bridgestan_version() -> str:
    """The version of the installed ``bridgestan`` package, which libraries report."""
    return ".".join(map(str, __version_info__))


def compile_library(
    source: PathLike,
    *,
    slots: Mapping[str, PathLike] | None = None,
    include_paths: Iterable[PathLike] = (),
    name: str | None = None,
    stanc_options: Mapping[str, Any] | None = None,
) -> Path:
    """Render and compile (once per content) a Stan program into a model library.

    The library is built with stanflow's own installation (built first if
    needed), also when cmdstanpy uses a CmdStan of the user's. Its cache key
    covers the rendered program, the name, that installation, the stanc flags
    and the BridgeStan version the library reports (the installed
    ``bridgestan`` package's, so that it loads without a version warning).

    Parameters
    ----------
    source : str or os.PathLike
        The Stan program or template.
    slots, include_paths
        Passed to :func:`stanflow.models.render`.
    name : str, optional
        Model name; defaults to ``source``'s file name without its suffix.
    stanc_options : mapping, optional
        stanc flags, e.g. ``{"O1": True}`` for ``--O1``.

    Returns
    -------
    pathlib.Path
        ``$STANFLOW_HOME/models/<key>/<name>_model.so``.

    Raises
    ------
    TemplateError
        If the template cannot be rendered.
    CompileError
        If stanc or the C++ compiler fails; the message names the template's
        file and line for stanc errors, and no cache entry is left behind.
    """
    name = check_name(name, source)
    stanc = check_options("stanc_options", dict(stanc_options or {}))
    code, origins = render_with_origins(
        source, include_paths=include_paths, slots=slots
    )
    root = installer.install()
    version = read_cmdstan_version(root)
    identity = {
        "path": str(root),
        "cmdstan_version": ".".join(map(str, version)) if version else "unknown",
        "artifact": "model library",
        "bridgestan": bridgestan_version(),
    }
    key = cache_key(code, name=name, toolchain=identity, cpp_options={},
                    stanc_options=stanc)
    manifest = {
        "name": name,
        "source": str(Path(source).resolve()),
        "slots": {k: str(Path(v).resolve()) for k, v in (slots or {}).items()},
        "stanc_options": stanc,
        "toolchain": identity,
    }

    def build(folder: Path) -> None:
        (folder / f"{name}.stan").write_text(code)
        target = folder / f"{name}{LIBRARY_SUFFIX}"
        command = [
            "make", "--no-print-directory",
            f"BRIDGESTAN_VERSION={identity['bridgestan']}",
            *(_stanc_flag(k, v) for k, v in stanc.items()),
            str(target),
        ]
        _log.info("compiling model library %s", target.name)
        started = time.perf_counter()
        result = subprocess.run(
            command, cwd=root, capture_output=True, text=True, check=False
        )
        console = result.stdout + result.stderr
        if result.returncode != 0 or not target.is_file():
            raise CompileError(
                f"Stan program {source} failed to compile into a model library:\n"
                f"{console}{origin_note(console, origins)}",
                console,
            )
        for leftover in folder.glob(f"{target.name}.*"):
            leftover.unlink()
        _log.info("compiled %s in %.1f s", target.name, time.perf_counter() - started)

    return ensure_entry(key, manifest, build) / f"{name}{LIBRARY_SUFFIX}"


def load(
    source: PathLike,
    data: str | PathLike | Mapping[str, Any] | None = None,
    *,
    slots: Mapping[str, PathLike] | None = None,
    include_paths: Iterable[PathLike] = (),
    name: str | None = None,
    seed: int = 1234,
    capture_stan_prints: bool = True,
) -> bridgestan.StanModel:
    """Compile if needed and load a Stan program with its data, in process.

    Parameters
    ----------
    source : str or os.PathLike
        A Stan program or template (compiled with :func:`compile_library`), or
        a library that function returned (``*_model.so``).
    data : mapping, str or os.PathLike, optional
        The data: a mapping (NumPy arrays welcome), a JSON string, or a path
        to a ``.json`` file; None for a program without data.
    slots, include_paths, name
        Passed to :func:`compile_library`.
    seed : int, default 1234
        Seed of the RNG used by the program's ``transformed data`` block.
    capture_stan_prints : bool, default True
        Show the program's ``print`` output through Python's ``print``.

    Returns
    -------
    bridgestan.StanModel
        BridgeStan's own class, with its documented API (``log_density``,
        ``log_density_gradient``, ``log_density_hessian``, ``param_constrain``,
        ...). :func:`stanflow.models.log_density_rows` evaluates many points at
        once on several threads.

    Raises
    ------
    ValueError
        If the program rejects the data (a missing variable, a wrong size, a
        failed constraint); the message is Stan's, naming the variable.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    path = Path(source)
    if path.name.endswith(LIBRARY_SUFFIX):
        if not path.is_file():
            raise ValueError(f"source: no model library at {path}")
        library = path
    else:
        library = compile_library(
            source, slots=slots, include_paths=include_paths, name=name
        )
    try:
        # Libraries are content addressed: a path that was loaded before holds
        # the same code, so bridgestan's reload warning does not apply.
        return bridgestan.StanModel(
            str(library), data, seed=seed,
            capture_stan_prints=capture_stan_prints, warn=False,
        )
    except RuntimeError as err:
        raise ValueError(f"data: {path.name} rejects its data: {err}") from None


def _stanc_flag(key: str, value: Any) -> str:
    flag = f"--{key}" if value is True else f"--{key}={value}"
    return f"STANCFLAGS+={flag}"
