"""``python -m kvconform``: the same as the ``kvconform`` command."""

import sys

from kvconform.conformance.cli import main

sys.exit(main())
