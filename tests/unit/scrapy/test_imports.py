"""The worker's entry loads neither Scrapy nor Twisted: the zygote forks workers after its
imports, and a reactor (or Scrapy's import-time state) must be made in the child."""

from __future__ import annotations

import subprocess
import sys


def test_the_worker_entry_and_the_package_import_no_scrapy_and_no_twisted() -> None:
    probe = (
        "import sys, crawlfleet.local.zygote, crawlfleet.launch, crawlfleet.scrapy;"
        " print(sorted(m for m in ('scrapy', 'twisted') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
