"""The tests' worker-memory reading is the worker's own, however large the test process is."""

from __future__ import annotations

import subprocess
import sys

from tests.support.crawls import wait_with_peak_rss


def test_a_child_of_a_large_test_process_is_measured_alone() -> None:
    # Late in a full suite pytest holds hundreds of MB; wait4's ru_maxrss would report them
    # as the child's peak (exec folds the starting memory's high-water mark into it).
    ballast = bytearray(400 * 1024 * 1024)
    ballast[::4096] = b"\1" * len(ballast[::4096])  # touched: resident
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    code, peak_kib = wait_with_peak_rss(proc, 30)
    assert code == 0
    assert 1_000 < peak_kib < 100 * 1024, peak_kib
    del ballast
