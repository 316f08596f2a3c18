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

import ctypes
import json
import logging
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import bridgestan
from bridgestan.__version import __version_info__

from stanflow.models.cache import (
    MANIFEST,
    CompileError,
    PathLike,
    cache_dir,
    cache_key,
    check_name,
    check_options,
    ensure_entry,
    entry_problem,
    key_lock,
    of_another_format,
)
from stanflow.models.templates import origin_note, render_with_origins
from stanflow.toolchain import installer
from stanflow.toolchain.discovery import read_cmdstan_version
from stanflow.validation import check_int

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
    A cached library is served once its files match the sizes and digests
    its entry records; otherwise it is rebuilt, with a warning. Whether it
    loads is checked by :func:`load`.

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
    provenance = {
        "source": str(Path(source).resolve()),
        "slots": {k: str(Path(v).resolve()) for k, v in (slots or {}).items()},
    }
    return _compile(code, origins, name=name, stanc=stanc, provenance=provenance)


def _compile(
    code: str,
    origins: list[tuple[Path, int]],
    *,
    name: str,
    stanc: Mapping[str, Any],
    provenance: Mapping[str, Any],
) -> Path:
    """The library of the rendered program ``code``, from the cache or built into it."""
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
    manifest = {"name": name, **provenance, "stanc_options": stanc, "toolchain": identity}
    library = f"{name}{LIBRARY_SUFFIX}"

    def build(folder: Path) -> None:
        (folder / f"{name}.stan").write_text(code)
        target = folder / library
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
                f"Stan program {provenance['source']} failed to compile into a model "
                f"library:\n{console}{origin_note(console, origins)}",
                console,
            )
        for leftover in folder.glob(f"{target.name}.*"):
            leftover.unlink()
        _log.info("compiled %s in %.1f s", target.name, time.perf_counter() - started)

    return ensure_entry(key, manifest, build) / library


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
        failed constraint); the message is Stan's, naming the variable. Also
        if there is no library at ``source``, if the library does not load
        (the message is the loader's; a cached library whose files match their
        record is left as it is, since the cause is then the process or the
        system), or if its cache entry is too damaged to rebuild.
    """
    seed = check_int(seed, "seed", 0)
    if seed >= 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    path = Path(source)
    if path.name.endswith(LIBRARY_SUFFIX):
        library = _served(path)
    else:
        library = compile_library(
            source, slots=slots, include_paths=include_paths, name=name
        )
    _check_loads(library)
    try:
        # Libraries are content addressed: a path that was loaded before holds
        # the same code, so bridgestan's reload warning does not apply.
        return bridgestan.StanModel(
            str(library), data, seed=seed,
            capture_stan_prints=capture_stan_prints, warn=False,
        )
    except RuntimeError as err:
        raise ValueError(f"data: {path.name} rejects its data: {err}") from None


def _served(library: Path) -> Path:
    """``library``, once its cache entry is sound; rebuilt first if the entry is unsound.

    A library outside the cache, or in an entry of another cache format, is
    served as it is. An entry found missing or unsound is looked at again
    under its key's lock: another process may be rebuilding it.
    """
    entry = _current_entry(library)
    if entry is None or entry_problem(entry) is None:
        return library
    with key_lock(entry.name):  # waits for a rebuild by another process to finish
        if not entry.is_dir() or entry_problem(entry) is None:
            return library  # sound now, or gone: _check_loads tells which
        manifest, code = _recorded_program(entry)
    return _rebuild(manifest, code)


def _current_entry(library: Path) -> Path | None:
    """The cache entry of the current format ``library`` is in, or None if it is in none."""
    entry = library.absolute().parent
    if entry.parent.resolve() != cache_dir().resolve() or of_another_format(entry):
        return None
    return entry


def _rebuild(manifest: Mapping[str, Any], code: str) -> Path:
    """Build the library of an unsound cache entry again, from the program it records.

    With the toolchain and BridgeStan the entry was built with, the key is the
    entry's: :func:`ensure_entry` finds it unsound, warns and replaces it. If
    either changed since, the program has another key, the library is built
    (or found) there and the damaged entry is left as it is.
    """
    provenance = {"source": manifest.get("source"), "slots": manifest.get("slots", {})}
    return _compile(code, [], name=manifest["name"], stanc=manifest["stanc_options"],
                    provenance=provenance)


def _recorded_program(entry: Path) -> tuple[dict[str, Any], str]:
    """The manifest and program of a library's cache entry, checked against its key."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        code = (entry / f"{manifest['name']}.stan").read_text()
        key = cache_key(code, name=manifest["name"], toolchain=manifest["toolchain"],
                        cpp_options={}, stanc_options=manifest["stanc_options"])
    except (OSError, ValueError, KeyError, TypeError):
        key = None
    if key != entry.name:
        raise ValueError(
            f"source: the cache entry {entry} is damaged and its program cannot be "
            "recovered from it; compile the program again with compile_library"
        )
    return manifest, code


def _check_loads(library: Path) -> None:
    """Raise a one-line ValueError naming ``library`` if it is missing or does not load.

    bridgestan loads the same path again; the loader then reuses this load.
    """
    if not library.is_file():
        raise ValueError(f"source: no model library at {library}")
    try:
        ctypes.CDLL(str(library.absolute().resolve()))
    except OSError as err:
        cause = (
            "; its files match its cache entry's record, so the cause is this process or "
            "system (a memory limit, a changed system library, another host); the entry "
            f"is left as it is: remove {library.parent} to compile it again"
        ) if _current_entry(library) else ""
        raise ValueError(
            f"source: the model library {library} does not load: {err}{cause}"
        ) from None


def _stanc_flag(key: str, value: Any) -> str:
    flag = f"--{key}" if value is True else f"--{key}={value}"
    return f"STANCFLAGS+={flag}"
