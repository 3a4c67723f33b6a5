"""Analyse layer: pure functions over stored records (no hardware, no I/O)."""
