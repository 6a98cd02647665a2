"""Digests as facts (`run.digest(facts, to=...)`): held digests merge into one covering the
whole span, counts summed, states from the latest. See core/rules/digest.py for the shape."""

from wakeful.core.rules.digest import Facts, facts, line, merge, quiet, render, render_lines

__all__ = ["Facts", "facts", "line", "merge", "quiet", "render", "render_lines"]
