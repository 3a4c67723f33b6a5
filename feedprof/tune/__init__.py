"""Tune: search the loader settings of an unmodified script.

How the parts meet (each module's NOTE draws its own part):

    tuner.py     the loop: baseline ─► space ─► strategy.ask() ─► budget checks
                 ─► trial.runner.run_trial() ─► strategy.tell(); results.json after
                 every trial; an observer (render/progress.py) is told, never asked
    space.py,    one framework's knobs: legal configs, their cost, the ladder's
    space_tf.py  rungs, which secondary knobs can matter, what is judged untrialled
    strategy.py  the next config as a function of the trials told so far
                 (LadderStrategy; GridStrategy for benchmarks)
    budget.py    memory and /dev/shm: rejects a config before it runs
    machine.py   the machine's facts (CPUs, ranks, RAM), read once by the tuner's caller

Running one isolated trial (a child process, a fork server, a launched job) is
the trial/ package's job; tune/ only decides what to run next.
Nothing here words anything for people: findings are store/reasons/ records,
which render/ words.
"""
