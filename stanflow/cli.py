"""The ``stanflow`` command line.

``stanflow toolchain install|info|path`` manage the CmdStan installation;
``stanflow list`` and ``stanflow run NAME`` list and run the workflows of
:mod:`stanflow.workflows`; ``stanflow results render|check FILE...``
re-render or check the results blocks of documents from the stored runs
(:mod:`stanflow.stored_results`). Those modules are imported only by the
commands that use them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from stanflow import __version__, outdir
from stanflow.toolchain import ToolchainError, ensure, info, install

EXIT_USAGE = 2
EXIT_FAILURE = 1
_FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


def _toolchain_install(args: argparse.Namespace) -> int:
    print(install(progress=not args.quiet, force=args.force))
    return 0


def _toolchain_info(args: argparse.Namespace) -> int:
    facts = info()
    if args.json:
        print(json.dumps(facts, indent=2))
    else:
        for name, value in facts.items():
            if name == "uses":
                print("uses:")
                for what, path in value.items():
                    print(f"  {what}: {path}")
                continue
            if isinstance(value, dict):
                print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in value.items()))
            else:
                print(f"{name}: {value}")
    return 0


def _toolchain_path(args: argparse.Namespace) -> int:
    print(ensure())
    return 0


def _workflows() -> ModuleType:
    return importlib.import_module("stanflow.workflows")


def _list(args: argparse.Namespace) -> int:
    for name, description in _workflows().list_workflows():
        print(f"{name:<24} {description}")
    return 0


def _run(args: argparse.Namespace) -> int:
    workflows = _workflows()
    names = [name for name, _ in workflows.list_workflows()]
    if args.name not in names:
        print(
            f"stanflow run: unknown workflow {args.name!r}; "
            f"valid names: {', '.join(names)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    out = args.out if args.out is not None else Path("runs") / args.name
    try:
        outdir.prepare(out)
        with outdir.hold(out, wait=args.wait):
            workflows.run_workflow(args.name, out=out, quick=args.quick)
    except outdir.FolderError as error:
        print(f"stanflow run: --out {error}", file=sys.stderr)
        return EXIT_FAILURE
    except outdir.RunFailed as error:
        print(f"stanflow run: {error}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt as interrupt:
        print(f"stanflow run: {outdir.interrupted_text(interrupt, out)}", file=sys.stderr)
        return outdir.EXIT_INTERRUPTED
    summary = out / "summary.json"
    print(f"{args.name}: results in {out}")
    if summary.is_file():
        print(f"  summary: {summary}")
    figures = sorted(out.rglob("*")) if out.is_dir() else []
    for figure in figures:
        if figure.suffix in _FIGURE_SUFFIXES:
            print(f"  figure:  {figure}")
    return 0


def _results(args: argparse.Namespace) -> int:
    stored = importlib.import_module("stanflow.stored_results")
    stale = 0
    for path in args.files:
        try:
            if args.action == "render":
                changed = stored.render_file(path, args.results)
                print(f"{path}: {changed} block(s) re-rendered" if changed else f"{path}: up to date")
            else:
                messages = stored.stale_blocks(path.read_text(), args.results)
                stale += len(messages)
                print(f"{path}: " + ("up to date" if not messages else "stale"))
                for message in messages:
                    print(f"  {message}")
        except (stored.ResultsError, OSError) as error:
            print(f"stanflow results: error: {error}", file=sys.stderr)
            return EXIT_FAILURE
    return EXIT_FAILURE if stale else 0


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the ``stanflow`` command."""
    parser = argparse.ArgumentParser(
        prog="stanflow",
        description="Generalized Bayesian inference on Stan.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    commands = parser.add_subparsers(dest="command", required=True)

    toolchain = commands.add_parser(
        "toolchain", help="find, build or describe the CmdStan installation"
    )
    actions = toolchain.add_subparsers(dest="action", required=True)
    install_parser = actions.add_parser(
        "install", help="build stanflow's CmdStan-compatible installation"
    )
    install_parser.add_argument(
        "--force", action="store_true", help="rebuild even if it exists"
    )
    install_parser.add_argument(
        "--quiet", action="store_true", help="no progress on stderr"
    )
    install_parser.set_defaults(handler=_toolchain_install)
    info_parser = actions.add_parser(
        "info", help="describe the installation in use (never builds)"
    )
    info_parser.add_argument("--json", action="store_true", help="print JSON")
    info_parser.set_defaults(handler=_toolchain_info)
    actions.add_parser(
        "path", help="print the installation's path, building it if needed"
    ).set_defaults(handler=_toolchain_path)

    commands.add_parser("list", help="list the workflows").set_defaults(
        handler=_list
    )
    run = commands.add_parser("run", help="run a workflow")
    run.add_argument("name", help="workflow name (see `stanflow list`)")
    run.add_argument(
        "--quick", action="store_true", help="small settings for a fast check"
    )
    run.add_argument(
        "--out", type=Path, default=None,
        help="output directory (default: runs/NAME)",
    )
    run.add_argument(
        "--wait", action="store_true",
        help="if another run holds the output directory, wait for it to end instead of refusing",
    )
    run.set_defaults(handler=_run)

    results = commands.add_parser(
        "results", help="render or check the results blocks of documents (docs/results.md)"
    )
    results_actions = results.add_subparsers(dest="action", required=True)
    for action, text in (
        ("render", "rewrite every results block from its stored summary"),
        ("check", "list the blocks that differ from their stored summary (exit 1 if any)"),
    ):
        command = results_actions.add_parser(action, help=text)
        command.add_argument("files", nargs="+", type=Path, help="Markdown files")
        command.add_argument(
            "--results", type=Path, default=Path("results"),
            help="folder of stored runs, one folder per workflow (default: results)",
        )
        command.set_defaults(handler=_results)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``stanflow`` command; return its exit code.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; defaults to ``sys.argv[1:]``.
    """
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ToolchainError as error:
        print(f"stanflow: error: {error}", file=sys.stderr)
        return EXIT_FAILURE
