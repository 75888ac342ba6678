"""The host-managed IMEX readiness probe: is the node's own nvidia-imex daemon ready?"""

from agent.hostimex.probe import HostImexNotReadyError, HostImexProbe, is_ready_output

__all__ = ["HostImexNotReadyError", "HostImexProbe", "is_ready_output"]
