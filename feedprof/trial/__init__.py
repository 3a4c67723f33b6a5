"""Trial: run the user's script (or launch command) once, isolated, and bring
back a result or a classified failure. Used by `tune` for every trial and by
`profile` for its one observed run.

    runner.py     one trial: a child process, sampled from outside, bounded in
                  time, reaped with its whole process group, classified if it ends badly
    jobrunner.py  the same for a launched job (torchrun, mpirun, a shell script):
                  every rank instrumented through bootstrap/, the job ended together
    options.py    what a trial is told: TrialOptions (its bounds), Injection (the knobs)
    flight.py     InFlight: one record of a trial from its launch to its Run (what was
                  launched, its files, when, its processes, watch and sampler)
    watch.py      polling a trial's events and time limits; kill_group reaps it
    ending.py     how a trial that ended badly ended, with the figures it measured
    child.py      inside that process: the script runs as __main__ with its
                  loaders instrumented (frameworks/ adapters, through
                  frameworks/contract.py), and ends once its window is measured
    controller.py what each loader gets, the training loader timed, the window, the result
    online_child.py  online mode (tune --online): the decided config served, windows of the run
    hosted.py     the same controller inside a launched rank (bootstrap/sitecustomize.py)
    protocol.py   the files runner and child exchange (spec, events, result)
    zygote.py     a fork server that imported the framework once, for later trials
    launch.py     a launch command parsed: which launcher, how many ranks
    failures.py   a failed child's cause
    replay.py     the compute ceiling's replayed batch; signals.py: deferred Ctrl-C
"""
