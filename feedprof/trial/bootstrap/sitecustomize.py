"""Run by every Python process of a job that feedprof launched (this directory
is first on its PYTHONPATH): a rank of the user's script gets the trial
controller (feedprof.trial.hosted); every other process, the launcher itself
or a loader worker started with spawn, is left alone, but for the lifeline
(trial/lifeline.py): the launcher and every rank that inherited it end their
process groups if feedprof is killed. Then the
sitecustomize this one shadows, if there is one, runs as it would have."""
import os
import sys


def _feedprof() -> None:
    if not os.environ.get("FEEDPROF_JOB_SPEC"):
        return
    ray_driver = os.environ.get("FEEDPROF_RAY_DRIVER")  # trial/ray_train.py's DRIVER_ENV
    if ray_driver and os.path.abspath(sys.argv[0] if sys.argv else "") != ray_driver:
        return  # one of the processes Ray starts: its training workers are reached through the driver
    try:
        from feedprof.trial.lifeline import watch_from_env

        watch_from_env()
        from feedprof.trial.hosted import maybe_host

        maybe_host()
    except Exception as exc:  # instrumenting must never stop the user's job from running
        print(f"feedprof: this process is not measured ({type(exc).__name__}: {exc})", file=sys.stderr)


def _the_shadowed_one() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        path = os.path.join(entry or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(entry or os.getcwd()) != here and os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                exec(compile(fh.read(), path, "exec"), {"__name__": "sitecustomize", "__file__": path})
            return


_feedprof()
_the_shadowed_one()
