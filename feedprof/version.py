"""feedprof's version, in a module of its own: what records are stamped with
(record/host.py) needs it without importing the public API above it."""
__version__ = "0.1.0"
