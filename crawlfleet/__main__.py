"""``python -m crawlfleet``: the same as the ``crawlfleet`` console script."""

import sys

from crawlfleet.cli import main

sys.exit(main())
