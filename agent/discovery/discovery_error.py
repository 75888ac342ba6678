"""The one error type of node discovery, so startup can print it and exit without a traceback."""

from __future__ import annotations


class DiscoveryError(RuntimeError):
    """Something about this node (driver, /proc files, NVML, fixtures) stops the agent.

    The message is the single line an admin reads at agent start: it says what is wrong
    and what to do about it. Callers print it as is; they never need the traceback.
    """
