"""Allow ``python -m stanflow``, the same as the ``stanflow`` command."""

import sys

from stanflow.cli import main

sys.exit(main())
