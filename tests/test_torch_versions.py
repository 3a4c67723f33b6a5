"""The seeded online tests (marked seeded_online) on every torch online mode was tested against
besides the pinned one (feedprof/frameworks/torch_support.py TESTED), each in the virtual
environment tests/torch_venvs makes (./tests/run --all makes them): online switching leans on
private members of torch's DataLoader iterator, so each version gets the same checks.

Where an environment could not be made (no registry), the test skips, unless
FEEDPROF_REQUIRE_TORCH_VERSIONS=1 (.ci/run): then it fails."""
import os
import subprocess

import pytest

from conftest import REPO
from feedprof.frameworks.torch_support import TESTED

PINNED = next(line.split("==")[1].strip() for line in open(os.path.join(REPO, "tests", "constraints.txt"))
              if line.startswith("torch=="))
REQUIRED = os.environ.get("FEEDPROF_REQUIRE_TORCH_VERSIONS") == "1"  # set by .ci/run
PREFIX = os.environ.get("FEEDPROF_TORCH_VENVS", os.path.join(REPO, ".venv-torch-"))  # set by tests/run


@pytest.mark.parametrize("version", [v for v in TESTED if v != PINNED])
def test_the_seeded_online_tests_pass_on_this_torch(version, tmp_path, e2e):
    python = f"{PREFIX}{version}/bin/python"
    if not os.path.exists(python):
        why = f"no environment with torch {version} at {PREFIX}{version} (tests/torch_venvs makes it)"
        if REQUIRED:
            pytest.fail(f"FEEDPROF_REQUIRE_TORCH_VERSIONS=1, but {why}")
        pytest.skip(why)
    found = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    assert found.stdout.split("+")[0].strip() == version, found.stderr
    proc = subprocess.run([python, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider",
                           "-m", "seeded_online", "--basetemp", str(tmp_path / "runs"),
                           "tests/test_online.py", "tests/test_online_shapes.py"],
                          cwd=REPO, capture_output=True, text=True, timeout=2400)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert " passed" in tail and "skipped" not in tail and "deselected" in tail, tail
