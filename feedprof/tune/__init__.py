"""Tune: search the loader settings of an unmodified script.

How the parts meet (each module's NOTE draws its own part):

    tuner.py     the loop: baseline ─► space ─► strategy.ask() ─► budget checks
                 ─► runner.run_trial() ─► strategy.tell(); results.json after
                 every trial; an observer (render/progress.py) is told, never asked
    space.py,    one framework's knobs: legal configs, their cost, the ladder's
    space_tf.py  rungs, which secondary knobs can matter, what is judged untrialled
    strategy.py  the next config as a function of the trials told so far
                 (LadderStrategy; GridStrategy for benchmarks)
    budget.py    memory and /dev/shm: rejects a config before it runs
    runner.py    one trial: a child process, sampled from outside, bounded in
                 time, reaped with its whole process group, classified if it ends badly
    child.py     inside that process: the script runs as __main__ with its
                 loaders instrumented (frameworks/ adapters, through
                 frameworks/contract.py), and ends once its window is measured
    protocol.py  the files runner and child exchange (spec, events, result)
    zygote.py    a fork server that imported the framework once, for later trials

Nothing here words anything for people: findings are reasons.py records,
which render/ words.
"""
