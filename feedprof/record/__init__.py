"""Record layer: turns a running process into plain, inert data.

Nothing here is imported by ``analyse`` or ``render``; what leaves this package
are the frozen dataclasses of :mod:`feedprof.store`. ``userframes.py`` says which
files (and so which frames, call sites and functions) are the user's own.
"""
