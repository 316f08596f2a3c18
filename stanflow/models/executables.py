"""Stan programs -> CmdStan executables, loaded as ``cmdstanpy.CmdStanModel``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import cmdstanpy

from stanflow import toolchain
from stanflow.models.cache import (
    CompileError,
    PathLike,
    cache_key,
    check_name,
    check_options,
    ensure_entry,
)
from stanflow.models.templates import origin_note, render_with_origins

DEFAULT_CPP_OPTIONS: dict[str, Any] = {"STAN_THREADS": True}
"""C++ options unless overridden; stanflow runs chains as threads of one process."""


def compile_model(
    source: PathLike,
    *,
    name: str | None = None,
    include_paths: Iterable[PathLike] = (),
    slots: Mapping[str, PathLike] | None = None,
    cpp_options: Mapping[str, Any] | None = None,
    stanc_options: Mapping[str, Any] | None = None,
    driver: str = "active",
) -> cmdstanpy.CmdStanModel:
    """Render, compile (once per content) and load a Stan program.

    The rendered program, the model name, the toolchain identity and the sorted
    flags are hashed into a key; ``$STANFLOW_HOME/models/<key>/`` holds the
    program, its executable and a ``stanflow.json`` manifest. A hit loads the
    executable without recompiling (and within one process returns the model
    object loaded before), once its files match the sizes and digests the
    manifest records; a damaged entry is rebuilt, with a warning. A miss
    compiles into a temporary folder beside it and renames it into place,
    under a per-key file lock, so two processes asking for the same model
    compile it once.

    Parameters
    ----------
    source : str or os.PathLike
        The Stan program or template; see :func:`stanflow.models.program_path`.
    name : str, optional
        Model name, letters, digits and ``_`` starting with a letter.
        Defaults to the file name of ``source`` without its suffix.
    include_paths, slots
        Passed to :func:`stanflow.models.render`.
    cpp_options : mapping, optional
        Merged over :data:`DEFAULT_CPP_OPTIONS`; a value of ``False`` or
        ``None`` removes the option (``{"STAN_THREADS": False}``).
    stanc_options : mapping, optional
        Passed to stanc through cmdstanpy, e.g. ``{"O1": True}``. Includes are
        resolved by :func:`render`, so ``include-paths`` is rejected here.
    driver : {"active", "stanflow"}, default "active"
        ``"active"`` builds with the installation cmdstanpy uses (a CmdStan of
        yours if you have one, else stanflow's). ``"stanflow"`` builds with
        stanflow's own installation, whose driver has stanflow's extensions
        (resumable ADVI for LCVI, batch mode for run sets); the two are the
        same when no CmdStan of yours is active. Either way the model runs
        through cmdstanpy.

    Returns
    -------
    cmdstanpy.CmdStanModel

    Raises
    ------
    TemplateError
        If the template cannot be rendered.
    CompileError
        If stanc or the C++ compiler fails; no cache entry is left behind.
    ValueError
        If ``name``, ``cpp_options`` or ``stanc_options`` is malformed.
    """
    name = check_name(name, source)
    if driver not in DRIVERS:
        raise ValueError(f"driver must be one of {DRIVERS}, got {driver!r}")
    cpp = check_options("cpp_options", {**DEFAULT_CPP_OPTIONS, **(cpp_options or {})})
    stanc = check_options("stanc_options", dict(stanc_options or {}))
    if "include-paths" in stanc:
        raise ValueError(
            "stanc_options: 'include-paths' is not used, stanflow resolves includes "
            "itself; pass include_paths= instead"
        )
    code, origins = render_with_origins(
        source, include_paths=include_paths, slots=slots
    )
    own = _own_installation(driver)
    identity = toolchain.identity() if own is None else toolchain.identity_of(own)
    key = cache_key(
        code, name=name, toolchain=identity, cpp_options=cpp, stanc_options=stanc
    )
    manifest = {
        "name": name,
        "source": str(Path(source).resolve()),
        "slots": {k: str(Path(v).resolve()) for k, v in (slots or {}).items()},
        "cpp_options": cpp,
        "stanc_options": stanc,
        "toolchain": identity,
    }

    def build(folder: Path) -> None:
        stan_file = folder / f"{name}.stan"
        stan_file.write_text(code)
        # make in the installation's folder as a child's working directory: cmdstanpy's
        # compile changes the process's, which breaks relative paths in other threads.
        root = Path(cmdstanpy.cmdstan_path()) if own is None else own
        try:
            _make(root, stan_file.with_suffix(""), cpp, stanc)
        except ValueError as err:
            console = str(err).split("Console:\n", 1)[-1]
            raise CompileError(
                f"Stan program {source} failed to compile:\n{console}"
                f"{origin_note(console, origins)}",
                console,
            ) from None

    entry = ensure_entry(key, manifest, build)
    exe = entry / name
    loaded = _LOADED.get(key)
    if loaded is None or loaded[0] != exe.stat().st_mtime_ns:
        model = cmdstanpy.CmdStanModel(
            stan_file=entry / f"{name}.stan",
            exe_file=exe,
            stanc_options=stanc or None,
            cpp_options=cpp or None,
        )
        loaded = _LOADED[key] = (exe.stat().st_mtime_ns, model)
    return loaded[1]


DRIVERS = ("active", "stanflow")
"""Which installation builds an executable; see :func:`compile_model`."""


def _own_installation(driver: str) -> Path | None:
    """stanflow's installation when it must build and is not the active one."""
    if driver == "active":
        return None
    own = toolchain.stanflow_installation()
    return None if own == toolchain.ensure() else own


def _make(root: Path, target: Path, cpp: Mapping[str, Any], stanc: Mapping[str, Any]) -> None:
    """Build ``target`` from ``target.stan`` with the makefile of ``root``, as cmdstanpy would."""
    command = [
        "make", "--no-print-directory",
        f"STANCFLAGS+=--filename-in-msg={target.name}.stan",
        *(f"STANCFLAGS+=--{k}" if v is True else f"STANCFLAGS+=--{k}={v}"
          for k, v in stanc.items()),
        *(f"{k}={v}" for k, v in cpp.items()),
        str(target),
    ]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not target.is_file():
        raise ValueError(f"make failed\nConsole:\n{result.stdout}{result.stderr}")


_LOADED: dict[str, tuple[int, cmdstanpy.CmdStanModel]] = {}
"""Models loaded in this process by cache key (with the executable's mtime):
building a ``CmdStanModel`` runs stanc for the program's info, about 40 ms,
which loops that compile the same program in every call need not pay again."""
