"""Names that are used but never defined, found without running the code (pyflakes): what a merge
or a moved import leaves behind where no test of the fast tier runs the line (a NameError that
every launched job met, once, until an end-to-end test ran it)."""
import os

import pytest

from conftest import REPO

pyflakes_api = pytest.importorskip("pyflakes.api")


class Collect:
    def __init__(self):
        self.problems = []

    def unexpectedError(self, filename, msg):
        self.problems.append(f"{filename}: {msg}")

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.problems.append(f"{filename}:{lineno}: {msg}")

    def flake(self, message):
        if type(message).__name__ in ("UndefinedName", "UndefinedExport", "UndefinedLocal"):
            self.problems.append(str(message))


def test_no_name_is_used_that_is_never_defined():
    from pyflakes.reporter import Reporter  # noqa: F401 - (the interface Collect stands in for)

    found = Collect()
    for top in ("feedprof", "benchmarks"):
        pyflakes_api.checkRecursive([os.path.join(REPO, top)], found)
    assert found.problems == []
