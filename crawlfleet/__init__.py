"""crawlfleet: web-crawler fleets steered from one Redis frontier.

Layout follows the architecture: ``frontier`` speaks Redis, ``crawler`` fetches,
``fleet`` decides, ``operator`` and ``local`` apply decisions; docs/architecture.md draws the
floors they stand on and who may import whom.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
