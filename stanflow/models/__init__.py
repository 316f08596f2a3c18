"""Stan programs for stanflow: templates, compiled executables, model libraries.

- :mod:`~stanflow.models.templates`: ``#include``-based templates rendered into
  one self-contained program (``docs/templates.md``);
- :mod:`~stanflow.models.cache`: the content-addressed cache both kinds of
  compiled artefact live in, ``$STANFLOW_HOME/models/<key>/``;
- :mod:`~stanflow.models.executables`: CmdStan executables for cmdstanpy
  (sampling, optimisation, ADVI, ... as processes);
- :mod:`~stanflow.models.libraries`: model libraries loaded in process by the
  ``bridgestan`` package (log densities, gradients, Hessians);
- :mod:`~stanflow.models.evaluation`: a loaded model at many points at once,
  on several threads (``docs/inprocess.md``).
"""

from stanflow.models.cache import CompileError, cache_dir, cache_key
from stanflow.models.evaluation import (
    constrain_rows,
    default_threads,
    log_density_gradient_rows,
    log_density_rows,
    unconstrain_rows,
)
from stanflow.models.executables import DEFAULT_CPP_OPTIONS, compile_model
from stanflow.models.libraries import compile_library, load
from stanflow.models.templates import (
    STAN_DIR,
    TemplateError,
    list_programs,
    program_path,
    render,
)
from stanflow.toolchain.layout import stanflow_home

__all__ = [
    "DEFAULT_CPP_OPTIONS",
    "STAN_DIR",
    "CompileError",
    "TemplateError",
    "cache_dir",
    "cache_key",
    "compile_library",
    "compile_model",
    "constrain_rows",
    "default_threads",
    "list_programs",
    "load",
    "log_density_gradient_rows",
    "log_density_rows",
    "program_path",
    "render",
    "stanflow_home",
    "unconstrain_rows",
]
