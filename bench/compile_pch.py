"""Benchmark: compiling a new model with vs without the precompiled header.

Each compile is of a fresh copy of ``stan/models/eight_schools_noncentered.stan``
carrying a unique comment, in a temporary folder, so nothing is cached. The
command lines are the ones stanflow's makefile runs (``make -n`` prints them):

* ``pch``: the C++ compile exactly as the makefile runs it, with
  ``-include build/threads/pch/stan_pch.hpp``, then the link;
* ``no_pch``: the same compile without that ``-include`` (stanc's C++ still
  includes ``stan/model/model_header.hpp`` itself), then the same link;
* ``cmdstanpy_pch``: the whole ``make`` (stanc + compile + link) driven by
  ``cmdstanpy.compile_stan_file`` with ``STAN_THREADS``, as
  ``stanflow.models.compile_model`` does on a cache miss.

Pairs are run alternating the order (pch first, then no_pch first, ...).
Only one compile runs at a time. With ``--phases`` three more compiles run
once with gcc's ``-ftime-report`` (an empty file with the PCH, the model with
and without it), to show where the time goes.

Usage::

    .venv/bin/python bench/compile_pch.py [--pairs 3] [--phases]
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import cmdstanpy
from _common import REPO, machine_info, median, print_table, run_timed, write_results

from stanflow import toolchain

MODEL = REPO / "stan" / "models" / "eight_schools_noncentered.stan"
PCH_INCLUDE = "build/threads/pch/stan_pch.hpp"


def fresh_model(folder: Path, tag: str) -> Path:
    """Write a copy of eight schools with a unique comment; return its path.

    Parameters
    ----------
    folder : pathlib.Path
        Where to write ``<tag>.stan``.
    tag : str
        File stem; must be a valid model name.

    Returns
    -------
    pathlib.Path
        The new ``.stan`` file.
    """
    path = folder / f"{tag}.stan"
    path.write_text(f"// bench/compile_pch.py {uuid.uuid4()}\n{MODEL.read_text()}")
    return path


def make_commands(root: Path, exe: Path) -> dict[str, list[str]]:
    """Ask the makefile (``make -n``) for the commands that build ``exe``.

    Parameters
    ----------
    root : pathlib.Path
        The toolchain installation (the makefile's folder).
    exe : pathlib.Path
        Absolute path of the model executable (``exe.stan`` must exist).

    Returns
    -------
    dict
        ``stanc``, ``compile`` (with the PCH ``-include``), ``compile_no_pch``
        (the same without it) and ``link`` command lines, run from ``root``.
    """
    out = subprocess.run(
        ["make", "-n", "STAN_THREADS=TRUE", str(exe)],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    commands: dict[str, list[str]] = {}
    for line in out.splitlines():
        argv = shlex.split(line)
        if not argv:
            continue
        if argv[0].endswith("stanc"):
            commands["stanc"] = argv
        elif "-c" in argv and f"{exe}.hpp" in argv:
            commands["compile"] = argv
        elif (
            f"{exe}.o" in argv
            and "-o" in argv
            and argv[argv.index("-o") + 1] == str(exe)
        ):
            commands["link"] = argv
    missing = {"stanc", "compile", "link"} - set(commands)
    if missing:
        raise RuntimeError(f"make -n printed no {sorted(missing)} command:\n{out}")
    compile_ = commands["compile"]
    i = compile_.index("-include")
    if compile_[i + 1] != PCH_INCLUDE:
        raise RuntimeError(f"unexpected -include in {compile_}")
    commands["compile_no_pch"] = compile_[:i] + compile_[i + 2 :]
    return commands


def check_pch_used(root: Path, commands: dict[str, list[str]]) -> bool:
    """Whether gcc really loads the ``.gch`` for the PCH compile line.

    Runs the compile line with ``-fsyntax-only -H`` (no code generation) and
    looks for gcc's ``! ...stan_pch.hpp.gch`` marker of a used PCH.
    """
    argv = [a for a in commands["compile"] if a not in ("-c",)]
    o = argv.index("-o")
    argv = argv[:o] + argv[o + 2 :] + ["-fsyntax-only", "-H", "-Winvalid-pch"]
    err = subprocess.run(
        argv, cwd=root, capture_output=True, text=True, check=False
    ).stderr
    return any(
        line.startswith("!") and line.endswith("stan_pch.hpp.gch")
        for line in err.splitlines()
    )


def compile_raw(root: Path, folder: Path, tag: str, pch: bool) -> dict[str, float]:
    """stanc, then compile and link one fresh model with or without the PCH.

    Returns
    -------
    dict
        Wall and CPU seconds of ``stanc``, ``compile`` and ``link``, and
        ``compile_link`` (their sum for compile + link).
    """
    stan = fresh_model(folder, tag)
    exe = stan.with_suffix("")
    commands = make_commands(root, exe)
    stanc = run_timed(commands["stanc"], root)
    comp = run_timed(commands["compile" if pch else "compile_no_pch"], root)
    link = run_timed(commands["link"], root)
    subprocess.run([str(exe), "info"], check=True, capture_output=True)
    for leftover in (exe, Path(f"{exe}.o"), Path(f"{exe}.hpp")):
        leftover.unlink(missing_ok=True)
    return {
        "stanc_wall": stanc.wall,
        "compile_wall": comp.wall,
        "compile_cpu": comp.cpu,
        "compile_sys": comp.sys,
        "link_wall": link.wall,
        "link_cpu": link.cpu,
        "compile_link_wall": comp.wall + link.wall,
        "compile_link_cpu": comp.cpu + link.cpu,
    }


_PHASE = re.compile(
    r"^\s*(phase [^:]+?|TOTAL)\s*:\s*([\d.]+)\s*(?:\(\s*\d+%\))?\s*"
    r"([\d.]+)\s*(?:\(\s*\d+%\))?\s*([\d.]+)"
)


def time_report(root: Path, argv: list[str]) -> dict[str, dict[str, float]]:
    """Run a compile line with gcc's ``-ftime-report``; return its phases.

    Returns
    -------
    dict
        Per gcc phase (``phase parsing``, ``phase lang. deferred`` i.e.
        end-of-file template instantiation, ``phase opt and generate``, ...)
        and ``TOTAL``: ``usr``, ``sys`` and ``wall`` seconds.
    """
    proc = subprocess.run(
        [*argv, "-ftime-report"], cwd=root, capture_output=True, text=True, check=True
    )
    phases = {}
    for line in proc.stderr.splitlines():
        match = _PHASE.match(line)
        if match:
            usr, sys_, wall = (float(match.group(i)) for i in (2, 3, 4))
            phases[match.group(1)] = {"usr": usr, "sys": sys_, "wall": wall}
    return phases


def phases(root: Path, folder: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Where the compile time goes: gcc phases of three compiles, run once.

    ``empty_tu_pch`` compiles an empty file with the PCH (the cost every model
    pays for the header even when it is precompiled); ``model_pch`` and
    ``model_no_pch`` compile a fresh eight-schools model both ways.
    """
    stan = fresh_model(folder, "m_phases")
    exe = stan.with_suffix("")
    commands = make_commands(root, exe)
    subprocess.run(commands["stanc"], cwd=root, check=True, capture_output=True)
    empty = folder / "empty.hpp"
    empty.write_text("\n")
    empty_cmd = [str(empty) if a == f"{exe}.hpp" else a for a in commands["compile"]]
    return {
        "empty_tu_pch": time_report(root, empty_cmd),
        "model_pch": time_report(root, commands["compile"]),
        "model_no_pch": time_report(root, commands["compile_no_pch"]),
    }


def compile_cmdstanpy(folder: Path, tag: str) -> dict[str, float]:
    """Compile one fresh model through cmdstanpy (whole ``make``, PCH path)."""
    stan = fresh_model(folder, tag)
    start = time.perf_counter()
    exe = cmdstanpy.compile_stan_file(
        stan, force=True, cpp_options={"STAN_THREADS": True}
    )
    wall = time.perf_counter() - start
    Path(exe).unlink()
    return {"make_wall": wall}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a table, write ``bench/results/compile_pch.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="alternating pairs")
    parser.add_argument(
        "--phases",
        action="store_true",
        help="also run three compiles with gcc -ftime-report (diagnostic)",
    )
    args = parser.parse_args(argv)

    info = machine_info()
    root = toolchain.ensure()
    gch = root / f"{PCH_INCLUDE}.gch"
    runs: dict[str, list[dict[str, float]]] = {
        "pch": [],
        "no_pch": [],
        "cmdstanpy_pch": [],
    }
    with tempfile.TemporaryDirectory(prefix="stanflow-bench-pch-") as tmp:
        folder = Path(tmp)
        probe = fresh_model(folder, "probe")
        probe_cmds = make_commands(root, probe.with_suffix(""))
        run_timed(probe_cmds["stanc"], root)
        pch_used = check_pch_used(root, probe_cmds)
        print(f"gcc uses the precompiled header: {pch_used}")
        for i in range(args.pairs):
            order = [True, False] if i % 2 == 0 else [False, True]
            for pch in order:
                key = "pch" if pch else "no_pch"
                result = compile_raw(root, folder, f"m_{key}_{i}", pch)
                runs[key].append(result)
                print(
                    f"pair {i}: {key:7s} compile+link {result['compile_link_wall']:.1f} s"
                )
            result = compile_cmdstanpy(folder, f"m_cmdstanpy_{i}")
            runs["cmdstanpy_pch"].append(result)
            print(f"pair {i}: cmdstanpy make (pch) {result['make_wall']:.1f} s")
        gcc_phases = phases(root, folder) if args.phases else None

    med = {
        key: {field: median([r[field] for r in rs]) for field in rs[0]}
        for key, rs in runs.items()
    }
    ratio_wall = med["pch"]["compile_link_wall"] / med["no_pch"]["compile_link_wall"]
    ratio_cpu = med["pch"]["compile_link_cpu"] / med["no_pch"]["compile_link_cpu"]
    ratio_compile = med["pch"]["compile_wall"] / med["no_pch"]["compile_wall"]
    print()
    print_table(
        [
            "variant",
            "stanc s",
            "compile s",
            "(of which sys)",
            "link s",
            "compile+link s",
            "c+l CPU s",
        ],
        [
            [
                k,
                med[k]["stanc_wall"],
                med[k]["compile_wall"],
                med[k]["compile_sys"],
                med[k]["link_wall"],
                med[k]["compile_link_wall"],
                med[k]["compile_link_cpu"],
            ]
            for k in ("pch", "no_pch")
        ],
    )
    print(
        f"\ncmdstanpy compile_stan_file (PCH, whole make): "
        f"{med['cmdstanpy_pch']['make_wall']:.1f} s median"
    )
    print(
        f"ratio pch / no_pch, compile+link wall: {ratio_wall:.3f} "
        f"(goal <= 0.5); CPU: {ratio_cpu:.3f}; compile only: {ratio_compile:.3f}"
    )
    if gcc_phases:
        names = sorted({n for ph in gcc_phases.values() for n in ph})
        print("\ngcc -ftime-report, user CPU s (one run each):")
        print_table(
            ["phase", *gcc_phases],
            [
                [n, *(ph.get(n, {}).get("usr", 0.0) for ph in gcc_phases.values())]
                for n in names
            ],
        )
    data = {
        "benchmark": "compile_pch",
        "command": ".venv/bin/python bench/compile_pch.py --pairs "
        f"{args.pairs}{' --phases' if args.phases else ''}",
        "machine": info,
        "toolchain": str(root),
        "pch_file_bytes": gch.stat().st_size,
        "pch_used_by_gcc": pch_used,
        "commands_example": {k: " ".join(v) for k, v in probe_cmds.items()},
        "runs": runs,
        "medians": med,
        "ratio_pch_over_no_pch_compile_link_wall": ratio_wall,
        "ratio_pch_over_no_pch_compile_link_cpu": ratio_cpu,
        "ratio_pch_over_no_pch_compile_only_wall": ratio_compile,
        "goal": "pch compile+link <= 0.5 x no-pch",
        "goal_met": ratio_wall <= 0.5,
        "gcc_phases": gcc_phases,
    }
    print(f"wrote {write_results('compile_pch', data)}")
    return data


if __name__ == "__main__":
    main()
