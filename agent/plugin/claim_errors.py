"""Per-claim outcomes: a permanent error goes back to kubelet at once; a retryable one is
retried inside the Prepare window, and if the window ends first it goes back to kubelet
prefixed with one of the words below (kubelet records it on the pod and calls again)."""

from __future__ import annotations

from typing import Final

STILL_WAITING: Final = "not ready yet, kubelet will retry"
STILL_RETRYING: Final = "failed for now, kubelet will retry"
# What every per-claim Prepare error starts with, before the claim (namespace/name:uid), as
# the reference's kubelet plugin says it.
PREPARE_FAILED_PREFIX: Final = "error preparing devices for claim"


class ClaimError(Exception):
    permanent = False


class PermanentError(ClaimError):
    permanent = True


class RetryableError(ClaimError):
    pass


class NotReadyError(RetryableError):
    """This node's IMEX daemon is not Ready yet: wait for a change, then try again.

    `since` is the watch generation observed before the failed check, so a change that
    lands between the check and the wait is never missed.
    """

    def __init__(self, message: str, since: tuple[int, ...]) -> None:
        super().__init__(message)
        self.since = since


class HostNotReadyError(RetryableError):
    """hostManaged: the host's nvidia-imex did not answer READY to the probe. Retried like
    any RetryableError, but a cause of waiting (not a failure) for the pod's Events."""
