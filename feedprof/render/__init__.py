"""Render layer: text and HTML from analyse's outputs (never imports record)."""
