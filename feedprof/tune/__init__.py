"""Tune: search the loader settings of an unmodified script.

How the parts meet (each module's NOTE draws its own part):

    tuner.py     the loop: baseline ─► space ─► strategy.ask() ─► budget checks
                 ─► trial.runner.run_trial() ─► strategy.tell(); results.json after
                 every trial; an observer (render/progress.py) is told, never asked
    space.py,    one framework's knobs: legal configs, their cost, the ladder's
    space_tf.py  rungs, which secondary knobs can matter, what is judged untrialled
    search.py    how the next config is chosen, offline and online: one search over
                 each config's evidence, every difference a Mode field (analyse/rules.py)
    strategy.py  the offline driver (LadderStrategy; GridStrategy for benchmarks, history.py);
                 online_strategy.py and online.py the online one
    budget.py    memory and /dev/shm: rejects a config before it runs
    machine.py   the machine's facts (CPUs, ranks, RAM), read once by the tuner's caller

Running one isolated trial (a child process, a fork server, a launched job) is
the trial/ package's job; tune/ only decides what to run next.
Nothing here words anything for people: findings are store/reasons/ records,
which render/ words.
"""
from __future__ import annotations

import inspect
import sys
import types
from typing import Any


class _Package(types.ModuleType):
    """Importing this package binds the name ``tune`` on feedprof to it, where the public
    function feedprof.tune() was (feedprof/__init__.py): the package calls that function, so a
    second feedprof.tune(...) in a session (a notebook) still tunes."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return sys.modules["feedprof"]._tune(*args, **kwargs)


sys.modules[__name__].__class__ = _Package
__signature__ = inspect.signature(sys.modules["feedprof"]._tune)  # (what help() and editors show)
