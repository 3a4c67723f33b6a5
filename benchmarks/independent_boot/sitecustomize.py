"""Bootstrap of benchmarks/independent.py: Python imports this at start-up when
this directory is on PYTHONPATH. It does nothing unless INDEP_HARNESS_SPEC is
set, so a process that merely inherits the path is left alone."""
import os

if os.environ.get("INDEP_HARNESS_SPEC"):
    import _indep_core

    _indep_core.install()
