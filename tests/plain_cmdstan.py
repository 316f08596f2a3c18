"""A CmdStan-shaped installation without stanflow's extensions, for tests.

It stands for a user's own CmdStan (``$CMDSTAN`` or ``~/.cmdstan``): a
``makefile`` with ``CMDSTAN_VERSION``, ``bin/stanc``, ``bin/stansummary`` and
``bin/diagnose``, and no stanflow marker, so stanflow takes it for the user's.
Its models are compiled by stanflow's installation (fast, with its precompiled
header) and then wrapped in a script that answers like CmdStan: the extension
arguments (``batch``, ``checkpoint``) are "mistyped or misplaced", and
``help-all`` does not list them. Everything else runs the real executable.
"""

from __future__ import annotations

import os
from pathlib import Path

MAKEFILE = """\
# A CmdStan-shaped installation for stanflow's tests (tests/plain_cmdstan.py).
CMDSTAN_VERSION := 2.35.0
REAL := {real}

/%: /%.stan
\t$(MAKE) --no-print-directory -C $(REAL) $@
\tmv $@ $@.real
\tcp {wrapper} $@
\tchmod +x $@

print-%:
\t@echo $* = $($*)
"""

WRAPPER = """\
#!/usr/bin/env bash
# A model as plain CmdStan builds it: no stanflow extensions.
for argument in "$@"; do
  case "$argument" in
    batch | checkpoint | save=* | load=*)
      echo "$argument is either mistyped or misplaced."
      echo "Failed to parse command arguments, cannot run model."
      exit 1 ;;
  esac
done
if [ "${1:-}" = "help-all" ]; then
  "$0.real" "$@" | grep -v -i -e checkpoint -e "stanflow extension" -e "save=" -e "load="
  exit 0
fi
exec "$0.real" "$@"
"""


def make_plain_cmdstan(real: Path, where: Path) -> Path:
    """Lay out the installation in ``where`` (idempotent), models built by ``real``.

    Parameters
    ----------
    real : pathlib.Path
        stanflow's own installation.
    where : pathlib.Path
        The folder to create; keep it stable across runs so that its models
        stay cached.

    Returns
    -------
    pathlib.Path
        ``where``.
    """
    (where / "bin").mkdir(parents=True, exist_ok=True)
    wrapper = where / "model-wrapper.sh"
    wrapper.write_text(WRAPPER)
    (where / "makefile").write_text(MAKEFILE.format(real=real, wrapper=wrapper))
    for tool in ("stanc", "stansummary", "diagnose"):
        link = where / "bin" / tool
        if not link.exists():
            os.symlink(real / "bin" / tool, link)
    return where
