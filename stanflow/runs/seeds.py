"""Seeds of the runs of a run set, derived from one root seed.

Run ``i`` gets the ``i``-th child of ``numpy.random.SeedSequence(root)``, i.e.
``SeedSequence(root, spawn_key=(i,))``, exactly what ``SeedSequence(root).spawn``
would hand out as its ``i``-th child. A run's seed therefore depends only on
the root and the run's index: not on how many runs there are, in which order
they finish, or how many workers run them.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from stanflow.validation import check_int

MAX_SEED = 2**32 - 1
"""CmdStan's largest seed (``random seed`` is an unsigned 32-bit number)."""


def new_root_seed() -> int:
    """Return fresh entropy to use as a root seed (recorded so a resume reuses it)."""
    # A SeedSequence given no entropy draws an int from the OS.
    return int(cast(int, np.random.SeedSequence().entropy))


def run_seed(root_seed: int, index: int) -> int:
    """Return the CmdStan seed of run ``index`` of a run set with ``root_seed``.

    Parameters
    ----------
    root_seed : int
        Non-negative root seed of the run set.
    index : int
        Non-negative position of the run in the run set.

    Returns
    -------
    int
        A seed in ``[0, 2**32 - 1]``.
    """
    root_seed = check_int(root_seed, "root_seed", 0)
    if index < 0:
        raise ValueError(f"index must be >= 0, got {index}")
    child = np.random.SeedSequence(int(root_seed), spawn_key=(int(index),))
    return int(child.generate_state(1, dtype=np.uint32)[0])
