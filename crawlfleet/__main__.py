"""``python -m crawlfleet``: the same as the ``crawlfleet`` console script."""

from crawlfleet.cli import run

run()
