"""Record layer: turns a running process into plain, inert data.

Nothing here is imported by ``analyse`` or ``render``; what leaves this package
are the frozen dataclasses of :mod:`feedprof.store`.
"""
