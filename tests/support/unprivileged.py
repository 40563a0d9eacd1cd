"""A child process for which file modes apply even when the tests run as root (as they do on these machines)."""

from __future__ import annotations

import os
import shutil

import pytest


def unprivileged(argv: list[str]) -> list[str]:
    """`argv` run without the capabilities that bypass file permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)
    when this process is root; unchanged otherwise."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("running as root and setpriv (util-linux) is missing: cannot drop the file capabilities")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", *argv]
