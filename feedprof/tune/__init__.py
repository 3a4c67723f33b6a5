"""Tune: the search space, a strategy that proposes configs, and a runner that
measures one config in an isolated child process. The three parts only meet
in tuner.py."""
