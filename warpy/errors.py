"""Errors a user can cause. The CLI prints these as one line, never a traceback."""

from __future__ import annotations


class WarpyError(Exception):
    """A problem with the user's input or environment, reported as one line."""


class NoGPU(WarpyError):
    """No GPU of the architecture a kernel needs is present."""
