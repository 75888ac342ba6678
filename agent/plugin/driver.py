"""Prepare and Unprepare of ComputeDomain claims: the reference's per-claim state machine.

The reference's is `DeviceState.Prepare` / `Unprepare` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/device_state.go.

Each claim step runs under the node lock and is idempotent: configs are decoded and
validated first (nothing is written for a bad claim), the checkpoint records
PrepareStarted before any side effect and PrepareCompleted after the last one, so a crash
anywhere leaves a state the next attempt or the next agent finishes or undoes. A workload
claim whose IMEX daemon is not Ready yet releases the lock and waits on the watch that
will report the daemon's readiness, then tries again at once.

Each outcome is also recorded as an Event on the pods that reserved the claim
(claimevents.py): why it waits (once per call), the error kubelet gets, and what a fresh
Prepare of a channel claim gave the pod (not again on kubelet's idempotent re-Prepare).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from agent.checkpoint import Checkpoint, CheckpointStore, ClaimEntry, PreparedDevice, PreparedGroup
from agent.plugin.claim_errors import (
    PREPARE_FAILED_PREFIX,
    STILL_RETRYING,
    STILL_WAITING,
    ClaimError,
    HostNotReadyError,
    NotReadyError,
    PermanentError,
    RetryableError,
)
from agent.plugin.claimconfig import Group, groups_for, parse_device
from agent.plugin.claimevents import ChannelOutcome, ClaimEvents, wait_reason
from agent.plugin.daemonclaim import check_daemon_claim
from agent.plugin.grpcserver import ClaimRef, PreparedDeviceResult, PrepareResult, RpcError
from agent.plugin.metrics import PluginMetrics
from agent.plugin.nodelock import NodeLock
from api import names
from api.computedomain import StoredComputeDomain
from api.opaque import ComputeDomainChannelConfig
from api.pod import Pod
from api.resourceclaim import AllocationResult, ResourceClaim
from api.validation_error import ValidationError
from cdi.atomic import make_dirs, write_if_changed
from runtime.events import EventRecorder
from runtime.logsetup import vlog

log = logging.getLogger(__name__)

STARTED, COMPLETED, ABORTED = "PrepareStarted", "PrepareCompleted", "PrepareAborted"
# A namespace (DNS-1123 label) or object name (DNS-1123 subdomain, a superset).
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


class Cluster(Protocol):
    """What the driver needs to know and do in the API (fakes implement it in unit tests)."""

    async def fetch_claim(self, ref: ClaimRef) -> ResourceClaim: ...
    async def claim_status(self, ref: ClaimRef) -> dict[str, Any]: ...
    async def add_cd_label(self, cd_uid: str) -> None: ...
    async def remove_cd_label(self, cd_uid: str) -> None: ...
    async def read_pod(self, namespace: str, name: str) -> Pod: ...
    async def compute_domain(self, uid: str, namespace: str | None = None
                             ) -> StoredComputeDomain | None: ...
    def known_domain(self, uid: str) -> StoredComputeDomain | None: ...
    async def follow(self, cd_uid: str, clique_id: str) -> None: ...
    def done_waiting(self, cd_uid: str) -> None: ...
    def node_ready(self, cd_uid: str, clique_id: str) -> bool: ...
    def daemon_entry(self, cd_uid: str, clique_id: str) -> str: ...
    def generation(self) -> tuple[int, ...]: ...
    async def wait_for_change(self, since: tuple[int, ...], timeout: float) -> None: ...


class DeviceEdits(Protocol):
    """CDI spec building and writing (agent.cdispecs), behind a seam for tests."""

    def channel_edits(self, channels: range | list[int]) -> Any: ...
    def daemon_edits(self, cd: StoredComputeDomain | None, clique_id: str) -> Any: ...
    def write_claim_spec(self, claim_uid: str, devices: list[tuple[str, Any]]) -> bool: ...
    def remove_claim_spec(self, claim_uid: str) -> None: ...
    def claim_cdi_ids(self, claim_uid: str, device: str, has_edits: bool,
                      daemon: bool) -> list[str]: ...
    def check_claim_uid(self, claim_uid: str) -> None: ...
    def spec_intact(self, claim_uid: str, devices: list[PreparedDeviceResult]) -> bool: ...
    def remove_orphaned_specs(self, known_uids: set[str]) -> list[Path]: ...


@dataclass
class DriverSettings:
    node_name: str
    host_managed: bool
    prepare_window_s: float
    domains_dir: Path
    imexd_template: bytes
    clique_id: Callable[[], str]
    host_probe: Callable[[], Awaitable[None]] | None = None
    namespace: str = "default"  # the driver's (--namespace), where the daemon pods run
    # Agent placement: this agent supervises nvidia-imex itself (imexhost.py).
    imex_host: ImexHostLike | None = None


class ImexHostLike(Protocol):
    """What the driver asks of the agent's IMEX supervision (agent/plugin/imexhost.py)."""

    @property
    def domains(self) -> list[str]: ...
    def ensure(self, cd: StoredComputeDomain, clique_id: str) -> None: ...
    def ready(self, cd_uid: str) -> bool: ...
    def describe(self, cd_uid: str) -> str: ...
    async def release_unused(self, checkpoint: Checkpoint) -> None: ...


class Driver:
    def __init__(self, settings: DriverSettings, cluster: Cluster, edits: DeviceEdits,
                 store: CheckpointStore, checkpoint: Checkpoint, lock: NodeLock,
                 metrics: PluginMetrics | None = None,
                 events: EventRecorder | None = None) -> None:
        self._s = settings
        self._metrics = metrics
        self._events = ClaimEvents(events, settings.node_name) if events is not None else None
        self._cluster = cluster
        self._edits = edits
        self._store = store
        self.checkpoint = checkpoint
        self._lock = lock
        self.on_change: Callable[[Checkpoint], None] = lambda cp: None

    # --- RPC entry points ------------------------------------------------------------

    async def prepare(self, refs: list[ClaimRef]) -> dict[str, PrepareResult]:
        if not refs:  # the health check's probe call: not work, not counted
            return {}
        if self._metrics is None:
            return await self._prepare(refs)
        with self._metrics.request("prepare"):
            results = await self._prepare(refs)
        for result in results.values():
            if result.error:
                self._metrics.prepare_errors.labels(names.DRIVER_NAME, "prepare_devices").inc()
        return results

    async def unprepare(self, refs: list[ClaimRef]) -> dict[str, str]:
        if self._metrics is None:
            return await self._unprepare(refs)
        with self._metrics.request("unprepare"):
            results = await self._unprepare(refs)
        for error in results.values():
            if error:
                self._metrics.unprepare_errors.labels(names.DRIVER_NAME,
                                                      "unprepare_devices").inc()
        return results

    async def _prepare(self, refs: list[ClaimRef]) -> dict[str, PrepareResult]:
        out: dict[str, PrepareResult] = {}
        valid = []
        for ref in refs:  # a malformed reference is that claim's error, not the whole RPC's
            problem = self._ref_problem(ref)
            if problem:
                log.error("prepare: %s", problem)
                out[ref.uid] = PrepareResult(error=problem)
            else:
                valid.append(ref)
        claims = [await self._cluster.fetch_claim(ref) for ref in valid]  # RpcError aborts
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._s.prepare_window_s
        results = await asyncio.gather(*(self._prepare_until(ref, claim, deadline)
                                         for ref, claim in zip(valid, claims, strict=True)))
        out.update({ref.uid: r for ref, r in zip(valid, results, strict=True)})
        return out

    def _ref_problem(self, ref: ClaimRef) -> str:
        """Why kubelet's reference to a claim cannot be used, or ''. The UID names a CDI
        spec file, namespace and name go into an API path: refuse anything that is not a
        plain Kubernetes name before it reaches either."""
        try:
            self._edits.check_claim_uid(ref.uid)
        except PermanentError as err:
            return str(err)
        for what, value, limit in (("namespace", ref.namespace, 63),
                                   ("name", ref.name, 253)):
            if len(value) > limit or not _DNS_NAME.fullmatch(value):
                return (f"refusing claim {what} {value!r} (claim UID {ref.uid}): not a valid "
                        f"Kubernetes object {what} (lower-case alphanumerics, '-' and '.', "
                        f"at most {limit} characters)")
        return ""

    async def _unprepare(self, refs: list[ClaimRef]) -> dict[str, str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._s.prepare_window_s
        out: dict[str, str] = {}
        for ref in refs:
            problem = self._ref_problem(ref)
            if problem:
                log.error("unprepare: %s", problem)
                out[ref.uid] = problem
                continue
            out[ref.uid] = await self._retry(
                functools.partial(self._unprepare_once, ref), deadline, ref, "unpreparing")
        return out

    # --- retry loop --------------------------------------------------------------------

    async def _prepare_until(self, ref: ClaimRef, claim: ResourceClaim, deadline: float
                             ) -> PrepareResult:
        devices: list[PreparedDeviceResult] = []
        fresh: list[ChannelOutcome] | None = None  # set when this call did the work
        last: list[Exception] = []
        waited: set[str] = set()

        async def once() -> None:
            nonlocal fresh
            try:
                devices[:], fresh = await self._prepare_once(ref, claim)
            except Exception as err:  # seen here, handled by _retry
                last[:] = [err]
                reason = wait_reason(err)
                if self._events is not None and reason is not None and reason not in waited:
                    waited.add(reason)  # once per call; the recorder limits it per minute
                    self._events.waiting(claim, err)
                raise

        error = await self._retry(once, deadline, ref, "preparing")
        if error:
            if self._events is not None and not (last and wait_reason(last[0])):
                self._events.failed(claim, error)
            # The reference's words (its driver.go nodePrepareResource): the kubelet puts
            # them into the pod's FailedPrepareDynamicResources Event, where runbooks grep.
            return PrepareResult(error=f"{PREPARE_FAILED_PREFIX} '{ref}': {error}")
        if self._events is not None and fresh:
            self._events.prepared(claim, fresh)
        # The reference's words (driver.go), then whether this call did the work.
        vlog(log, 1, "Prepared devices for claim '%s': %s (%s)", ref,
             ", ".join(f"{d.device} {list(d.cdi_device_ids)}" for d in devices) or "none",
             "newly prepared" if fresh is not None else "was already prepared")
        return PrepareResult(devices=tuple(devices))

    async def _retry(self, step: Callable[[], Awaitable[None]], deadline: float,
                     ref: ClaimRef, verb: str) -> str:
        """'' on success, else the error for kubelet: a permanent one, or why the claim is
        still waiting when the deadline comes. The reference leaves a waiting claim out of
        the response instead, so kubelet only ever says "skipped 1 ResourceClaims"; the
        reason in the error reaches the pod's Events (`kubectl describe pod`), and kubelet
        retries an error exactly as it retries a skipped claim."""
        loop = asyncio.get_running_loop()
        delay = 0.05
        what = str(ref)
        attempt = 0
        while True:
            attempt += 1
            try:
                await step()
                return ""
            except PermanentError as err:
                # The reference's line (driver.go), which its own tests and runbooks grep.
                log.error("Permanent error %s devices for claim %s: error %s devices for "
                          "claim '%s': %s", verb, ref.uid, verb, ref, err)
                return str(err)
            except NotReadyError as err:
                self._log_retry(verb, ref, err, attempt)
                remaining = deadline - loop.time()
                if remaining <= 0:
                    log.info("%s: still waiting at the end of this call: %s", what, err)
                    return f"{STILL_WAITING}: {err}"
                # A resync as safety net: re-check at least every 5 s even without events.
                await self._cluster.wait_for_change(err.since, min(remaining, 5.0))
            except RetryableError as err:
                self._log_retry(verb, ref, err, attempt)
                remaining = deadline - loop.time()
                if remaining <= 0:
                    log.warning("%s: giving up for this call: %s", what, err)
                    return f"{STILL_RETRYING}: {err}"
                await asyncio.sleep(min(delay, remaining))
                delay = min(delay * 2, 2.0)
            except Exception as err:  # a bug: say so to kubelet instead of hanging the RPC
                log.exception("%s: unexpected failure", what)
                return f"internal error in compute-domain-agent: {err!r}"

    @staticmethod
    def _log_retry(verb: str, ref: ClaimRef, err: Exception, attempt: int) -> None:
        """The reference's line for each failed try of a claim (its pkg/workqueue), at info
        as there: what its runbooks grep to see a Prepare that keeps waiting, and why."""
        log.info("Reconcile: error %s devices for claim '%s': %s (attempt %d)", verb, ref, err,
                 attempt)

    # --- checkpoint ----------------------------------------------------------------------

    def stale_started(self) -> list[ClaimRef]:
        """Claims whose Prepare started and never finished (candidates for cleanup)."""
        return [ClaimRef(e.namespace, uid, e.name)
                for uid, e in list(self.checkpoint.claims.items())
                if e.state == STARTED and e.name]

    async def sweep(self) -> tuple[int, int]:
        """Drop expired tombstones and the CDI files of claims the checkpoint no longer
        knows, under the node lock; (tombstones, orphaned files) removed."""
        async with self._lock.held():
            expired = self.checkpoint.delete_expired_tombstones(datetime.now(UTC))
            if expired:
                self._save()
            known = {u for u, e in self.checkpoint.claims.items() if e.state != ABORTED}
            return len(expired), len(self._edits.remove_orphaned_specs(known))

    def _save(self) -> None:
        self._store.write(self.checkpoint)
        if self._metrics is not None:
            self._metrics.set_prepared(self.checkpoint.prepared_device_counts())
        self.on_change(self.checkpoint)

    # --- prepare ---------------------------------------------------------------------------

    async def _prepare_once(self, ref: ClaimRef, claim: ResourceClaim
                            ) -> tuple[list[PreparedDeviceResult], list[ChannelOutcome] | None]:
        """The devices for kubelet, and what each channel config gave the pod when this
        call prepared the claim (None when it was already prepared)."""
        self._edits.check_claim_uid(ref.uid)
        async with self._lock.held():
            return await self._prepare_locked(ref, claim)

    async def _prepare_locked(self, ref: ClaimRef, claim: ResourceClaim
                              ) -> tuple[list[PreparedDeviceResult], list[ChannelOutcome] | None]:
        status = claim.status_json  # what the checkpoint stores, verbatim
        entry = self.checkpoint.claims.get(ref.uid)
        if entry is not None and entry.state == COMPLETED and self._edits.spec_intact(
                ref.uid, _results_from(entry)):
            return _results_from(entry), None
        if entry is not None and entry.state == ABORTED and entry.status_matches(status):
            raise PermanentError(f"stale prepare for claim {ref}: claim prepare was already "
                                 "aborted")
        if claim.allocation is None:  # fetch_claim refuses those
            raise PermanentError(f"claim {ref} not allocated")
        groups = groups_for(claim.allocation)
        for group in groups:
            self._check_group(group)
        self._check_overlap(ref.uid, status)
        for group in groups:
            self._check_ownership(ref.uid, group)
            await self._check_domain(ref, group)
            if not group.is_channel:
                await check_daemon_claim(
                    ref, claim, group.config.domain_id, driver_namespace=self._s.namespace,
                    node=self._s.node_name, read_pod=self._cluster.read_pod)
        self.checkpoint.claims[ref.uid] = ClaimEntry(
            state=STARTED, status=status, prepared=None, name=ref.name,
            namespace=ref.namespace, aborted_at=None)
        self._save()
        prepared: list[PreparedGroup] = []
        spec_devices: list[tuple[str, Any]] = []
        labels: dict[str, asyncio.Future[None]] = {}  # domain -> its label write, in flight
        ready: list[tuple[str, str]] = []
        try:
            for group in groups:
                prepared.append(await self._apply(ref, group, spec_devices, labels, ready))
            has_spec = (self._edits.write_claim_spec(ref.uid, spec_devices) if spec_devices
                        else False)
            if not has_spec:
                self._edits.remove_claim_spec(ref.uid)
        finally:
            labelled = await asyncio.gather(*labels.values(), return_exceptions=True)
        for outcome in labelled:
            if isinstance(outcome, BaseException):
                self._edits.remove_claim_spec(ref.uid)  # written for a claim not prepared
                raise outcome
        for cd_uid, clique in ready:
            await self._wait_node_ready(cd_uid, clique)
        self.checkpoint.claims[ref.uid] = ClaimEntry(
            state=COMPLETED, status=status, prepared=prepared, name=ref.name,
            namespace=ref.namespace, aborted_at=None)
        self._save()
        outcomes = [self._channel_outcome(g, p)
                    for g, p in zip(groups, prepared, strict=True) if g.is_channel]
        return _results_from(self.checkpoint.claims[ref.uid]), outcomes

    def _channel_outcome(self, group: Group, prepared: PreparedGroup) -> ChannelOutcome:
        """What a prepared channel config gave the pod, in words for its Event."""
        config = group.config
        assert isinstance(config, ComputeDomainChannelConfig)
        if self._s.host_managed:
            channels = ", ".join(f"channel {d.id}" for d in prepared.devices)
        elif config.all_channels:
            channels = f"all {names.MAX_IMEX_CHANNELS} channels"
        else:
            channels = "channel 0"
        return ChannelOutcome(domain_id=prepared.domain_id, channels=channels,
                              cdi_ids=tuple(i for d in prepared.devices for i in d.cdi_device_ids))

    def _check_group(self, group: Group) -> None:
        if group.is_channel:
            if len(group.results) != 1:
                raise PermanentError("applyComputeDomainChannelConfig: unexpected results: a "
                                     f"channel config applies to exactly one device, got "
                                     f"{len(group.results)}")
            return
        if self._s.host_managed:
            raise PermanentError("ComputeDomain daemon claims are not supported when "
                                 "imex.mode=hostManaged")
        if len({r.device for r in group.results}) != 1:
            raise PermanentError("only expected 1 device for requests "
                                 f"{sorted({r.request or '' for r in group.results})}")

    def _check_overlap(self, uid: str, status: dict[str, Any]) -> None:
        overlap = self.checkpoint.device_overlap(uid, status)
        if overlap is not None:
            device, owner = overlap
            raise RetryableError(f"requested device {device} is already allocated to "
                                 f"different claim {owner}")

    def _check_ownership(self, uid: str, group: Group) -> None:
        if not group.is_channel:
            return
        device = parse_device(group.results[0].device or "")
        assert device is not None  # groups_for validated it
        channel = device.id if self._s.host_managed else 0
        owner = self.checkpoint.channel_owner(channel, exclude_uid=uid)
        if owner is not None:
            raise RetryableError(f"allocation failed: channel {channel} already allocated by "
                                 f"claim {owner} (according to checkpoint)")

    def _not_ready_message(self, cd_uid: str, clique: str) -> str:
        """Why a workload claim waits, and where to look for the cause: the daemon pod's
        Events (IMEXDaemonExited, IMEXDaemonNotReady) and log."""
        node, ns = self._s.node_name, self._s.namespace
        return (
            f"current node not ready in ComputeDomain {cd_uid}: waiting for the IMEX daemon "
            f"on {node} to report Ready ({self._cluster.daemon_entry(cd_uid, clique)}); see "
            f"why with: kubectl describe -n {ns} $(kubectl get pod -n {ns} -o name "
            f"-l {names.LABEL_COMPUTE_DOMAIN}={cd_uid} --field-selector spec.nodeName={node})")

    async def _wait_node_ready(self, cd_uid: str, clique: str) -> None:
        """NotReadyError until this node's IMEX of the domain is Ready: the daemon pod's
        clique entry, as watched (pod placement), or the agent's own supervisor, started
        here (agent placement; a node without clique runs no IMEX)."""
        host = self._s.imex_host
        if host is None:
            await self._cluster.follow(cd_uid, clique)
            since = self._cluster.generation()
            if not self._cluster.node_ready(cd_uid, clique):
                raise NotReadyError(self._not_ready_message(cd_uid, clique), since)
            self._cluster.done_waiting(cd_uid)
            return
        if not clique:
            return
        cd = self._cluster.known_domain(cd_uid)
        if cd is None:  # _check_domain found it moments ago; it has just been forgotten
            raise RetryableError(f"ComputeDomain not found: {cd_uid} (waiting for it to appear)")
        since = self._cluster.generation()
        host.ensure(cd, clique)
        if not host.ready(cd_uid):
            node = self._s.node_name
            raise NotReadyError(
                f"current node not ready in ComputeDomain {cd_uid}: waiting for this node's "
                f"nvidia-imex, supervised by the node agent, to report READY "
                f"({host.describe(cd_uid)}); see why with: kubectl describe node {node}, "
                f"and the log of the compute-domain kubelet plugin on {node}", since)

    async def _check_domain(self, ref: ClaimRef, group: Group) -> None:
        uid = group.config.domain_id
        # A workload claim lives in its domain's namespace: look there first.
        cd = await self._cluster.compute_domain(uid, ref.namespace if group.is_channel else None)
        if cd is None:
            raise RetryableError(f"ComputeDomain not found: {uid} (waiting for it to appear)")
        if group.is_channel and cd.metadata.namespace != ref.namespace:
            raise PermanentError(
                "the ResourceClaim's namespace is different than the ComputeDomain's namespace "
                f"({ref.namespace} != {cd.metadata.namespace}): create the workload in "
                "the ComputeDomain's namespace")

    async def _apply(self, ref: ClaimRef, group: Group, spec_devices: list[tuple[str, Any]],
                     labels: dict[str, asyncio.Future[None]], ready: list[tuple[str, str]]
                     ) -> PreparedGroup:
        """The group's devices and CDI edits. A driver-managed channel's node label write
        is started here and left in flight (`labels`) while the claim's spec is written,
        and its wait for this node's IMEX (`ready`) comes once the label landed: the two
        are a round trip and a durable file write that need not follow each other
        (tests/bench/bench_prepare.py)."""
        cd_uid = group.config.domain_id
        clique = self._s.clique_id()
        device = parse_device(group.results[0].device or "")
        assert device is not None
        edits = None
        if group.is_channel:
            config = group.config
            assert isinstance(config, ComputeDomainChannelConfig)
            if self._s.host_managed:
                if clique and self._s.host_probe is not None:
                    try:
                        await self._s.host_probe()
                    except Exception as err:
                        raise HostNotReadyError(
                            f"host nvidia-imex daemon readiness check failed: {err}") from None
                if clique:
                    edits = self._edits.channel_edits([device.id])
            else:
                if cd_uid not in labels:
                    labels[cd_uid] = asyncio.ensure_future(self._cluster.add_cd_label(cd_uid))
                ready.append((cd_uid, clique))
                if clique:
                    count = names.MAX_IMEX_CHANNELS if config.all_channels else 1
                    edits = self._edits.channel_edits(range(count))
                else:
                    log.info("%s: node %s has no NVLink clique: no IMEX channel injected", ref,
                             self._s.node_name)
        else:
            self._ensure_domain_dir(cd_uid)
            edits = self._edits.daemon_edits(self._cluster.known_domain(cd_uid), clique)
        devices = []
        for res in group.results:
            name = res.device or ""
            daemon = not group.is_channel
            cdi_ids = self._edits.claim_cdi_ids(ref.uid, name, edits is not None, daemon)
            if edits is not None:
                spec_devices.append((name, edits))
            dev = parse_device(name)
            assert dev is not None
            devices.append(PreparedDevice(
                kind=dev.kind, id=dev.id, requests=[res.request or ""],
                pool=res.pool or "", device=name, cdi_device_ids=cdi_ids))
        return PreparedGroup(config_type=names.DEVICE_TYPE_CHANNEL if group.is_channel
                             else names.DEVICE_TYPE_DAEMON, domain_id=cd_uid, devices=devices)

    def _ensure_domain_dir(self, cd_uid: str) -> None:
        """The domain directory and its IMEX config template. The directory is every daemon
        pod's read-write `/imexd`: a link planted there is replaced, never followed."""
        directory = self._s.domains_dir / cd_uid
        make_dirs(directory, 0o755)
        write_if_changed(directory / names.IMEXD_CONFIG_TEMPLATE, self._s.imexd_template)

    # --- unprepare -------------------------------------------------------------------------

    async def _unprepare_once(self, ref: ClaimRef) -> None:
        self._edits.check_claim_uid(ref.uid)
        async with self._lock.held():
            entry = self.checkpoint.claims.get(ref.uid)
            if entry is None or entry.state == ABORTED:
                vlog(log, 2, "Unprepare noop: %s: %s", "claim not found in checkpoint data"
                     if entry is None else "claim in PrepareAborted state", ref)
                return
            if entry.state not in (STARTED, COMPLETED):
                raise PermanentError(f"unsupported ClaimCheckpointState {entry.state!r}")
            status = entry.status or {}
            if not status.get("allocation"):
                status = await self._cluster.claim_status(ref)
            await self._undo(status)
            self._edits.remove_claim_spec(ref.uid)
            if entry.state == COMPLETED:
                del self.checkpoint.claims[ref.uid]
            else:
                self.checkpoint.claims[ref.uid] = ClaimEntry(
                    state=ABORTED, status=entry.status, prepared=None, name=ref.name,
                    namespace=ref.namespace, aborted_at=datetime.now(UTC).replace(microsecond=0))
            self._save()
            vlog(log, 6, "%s: %s", "Deleted claim from checkpoint" if entry.state == COMPLETED
                 else "Marked claim PrepareAborted in checkpoint", ref)
            if self._s.imex_host is not None:
                await self._s.imex_host.release_unused(self.checkpoint)
        vlog(log, 1, "Unprepared devices for claim '%s'", ref)

    async def _undo(self, status: Mapping[str, Any]) -> None:
        """Take back what a prepare did, from `status` as the checkpoint stored it."""
        if self._s.host_managed:
            return
        try:
            groups = groups_for(AllocationResult.from_dict(status["allocation"]), strict=False)
        except (ClaimError, ValidationError) as err:
            log.warning("unprepare: stored allocation no longer decodes (%s); nothing to undo",
                        err)
            return
        for group in groups:
            if group.is_channel:
                await self._cluster.remove_cd_label(group.config.domain_id)


def _results_from(entry: ClaimEntry) -> list[PreparedDeviceResult]:
    return [PreparedDeviceResult(requests=tuple(d.requests), pool=d.pool, device=d.device,
                                 cdi_device_ids=tuple(d.cdi_device_ids),
                                 share_id=getattr(d, "share_id", None))
            for g in entry.prepared or () for d in g.devices]


__all__ = ["Driver", "DriverSettings", "RpcError"]
