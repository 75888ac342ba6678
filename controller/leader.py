"""Lease-based leader election with client-go `leaderelection` semantics.

client-go's is https://github.com/kubernetes/client-go/tree/master/tools/leaderelection; the
reference controller runs under it (`runWithLeaderElection` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-controller/main.go).

Only one controller replica may reconcile at a time, or two would fight over the same
objects. Replicas compete for a `coordination.k8s.io/v1` Lease: the holder renews it every
`retry_period`; a standby takes it once the holder let it lapse or released it. Writes use
optimistic concurrency (the read resourceVersion), so two standbys racing for an expired
lease cannot both win: the loser gets a 409 and re-reads.

Timing contract (as in client-go): `lease_duration > renew_deadline > retry_period`. A leader
that cannot renew for `renew_deadline` stops leading before anyone else may take the lease
(`lease_duration` after its last renewal), so two `lead()` calls never overlap as long as
`lead()` honours cancellation promptly and clocks agree within the margin.

A lease counts as expired when either clock says so:
- wall clock: `renewTime + leaseDurationSeconds` has passed (lets a freshly started standby
  take a long-dead lease at once; assumes roughly synchronised clocks), or
- local monotonic clock: the Lease has not changed (same resourceVersion) for our own
  `lease_duration` since we first saw that version (client-go's rule; immune to clock skew).

Lease times are written exactly as client-go does, RFC 3339 with microseconds and `Z`. The
typed `kubernetes` models would send `+00:00` and drop a zero fraction (which a real API
server's MicroTime parser rejects), so writes go out as plain JSON through the ApiClient.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Lease = dict[str, Any]

# client-go's JitterFactor for the acquire loop: wait retry_period * [1, 2.2).
JITTER_FACTOR = 1.2
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
# How often one attempt re-reads after a 409 before giving up until the next period.
_CONFLICT_RETRIES = 3


def format_micro_time(moment: datetime) -> str:
    """`metav1.MicroTime` as client-go marshals it: `2026-11-29T10:00:00.000000Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc_now() -> datetime:
    """The wall clock LeaderElector uses by default."""
    return datetime.now(UTC)


def parse_time(text: Any) -> datetime | None:
    """Parse an RFC 3339 time as the API returns it; None if absent or malformed."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class LeaderElector:
    """Campaigns for a Lease and runs a callback while holding it.

    `run(lead)` returns True when `lead()` returned on its own while we led, False when
    leadership was lost (renewal failed for `renew_deadline`, or someone else holds the
    lease); `lead()` is cancelled in the latter case. An exception from `lead()` propagates
    after the lease is released. Cancelling `run()` cancels `lead()` and releases the lease.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15,
        renew_deadline: float = 10,
        retry_period: float = 2,
        release_on_cancel: bool = True,
        on_change: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= JITTER_FACTOR * retry_period:
            raise ValueError(f"renew_deadline must be greater than {JITTER_FACTOR} * retry_period")
        if retry_period <= 0:
            raise ValueError("retry_period must be positive")
        self._api = client.CoordinationV1Api(api_client)
        self._name = name
        self._namespace = namespace
        self._identity = identity
        self._lease_duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._release_on_cancel = release_on_cancel
        self._on_change = on_change
        self._rng = rng or random.Random()
        # Injectable for tests on a virtual event-loop clock: `clock` must keep the pace of
        # the loop's (whose asyncio.sleep and asyncio.timeout pace the periods).
        self._clock = clock
        self._wall_clock = wall_clock

        self._lease: Lease | None = None  # last version read or written
        self._observed_rv: str | None = None
        self._observed_at = 0.0  # monotonic time the Lease last changed, as far as we saw
        self._holder: str | None = None  # last observed holder, for on_change
        self._is_leader = False

    # --- public -----------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def is_leader(self) -> bool:
        """True while we hold the lease and `lead()` may run."""
        return self._is_leader

    @property
    def holder(self) -> str | None:
        """The holder last seen on the Lease ("" when released, None before the first read)."""
        return self._holder

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Acquire the lease, run `lead()` while renewing it; see the class docstring."""
        await self._acquire()
        self._is_leader = True
        # The reference controller's words (klog.InfoS in its main.go), then the lease.
        log.info('"Became leader, starting controller" lockID="%s" lease="%s/%s"',
                 self._identity, self._namespace, self._name)
        lead_task = asyncio.create_task(lead(), name=f"lead-{self._identity}")
        renew_task = asyncio.create_task(self._renew(), name=f"renew-{self._identity}")
        lost = False
        try:
            done, _ = await asyncio.wait(
                {lead_task, renew_task}, return_when=asyncio.FIRST_COMPLETED
            )
            lost = renew_task in done
        finally:
            self._is_leader = False
            for task in (renew_task, lead_task):
                task.cancel()
            await asyncio.gather(renew_task, lead_task, return_exceptions=True)
            if self._release_on_cancel:
                await self._release()
        if lost:
            log.warning("Stopped leading, lockID: %s (lease %s/%s)", self._identity,
                        self._namespace, self._name)
            if not lead_task.cancelled() and lead_task.exception() is not None:
                log.error(
                    "%s: lead() failed while stopping",
                    self._identity,
                    exc_info=lead_task.exception(),
                )
            return False
        lead_task.result()  # re-raise lead()'s error, now that the lease is released
        return True

    # --- campaign ---------------------------------------------------------------------

    async def _acquire(self) -> None:
        while True:
            try:
                if await self._try_acquire_or_renew():
                    return
            except Exception as exc:
                log.info("%s: cannot acquire lease %s: %s", self._identity, self._name, exc)
            await asyncio.sleep(self._retry_period * (1 + self._rng.random() * JITTER_FACTOR))

    async def _renew(self) -> None:
        """Renew every retry_period; return when renewal has failed for renew_deadline."""
        last_ok = self._clock()
        while self._is_leader:
            await asyncio.sleep(self._retry_period)
            remaining = self._renew_deadline - (self._clock() - last_ok)
            if remaining <= 0:
                return
            try:
                # Not asyncio.wait_for: on 3.11 it can swallow a cancel that races with the
                # inner call finishing, which would leave a zombie renewing the lease.
                async with asyncio.timeout(remaining):
                    ok = await self._try_acquire_or_renew()
            except TimeoutError:
                log.warning("%s: renewal timed out", self._identity)
                return
            except Exception as exc:
                log.info("%s: cannot renew lease %s: %s", self._identity, self._name, exc)
                ok = False
            if ok:
                last_ok = self._clock()
            elif self._holder not in (None, self._identity):
                return  # someone else holds it now: no point waiting for the deadline

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt: True when we hold the lease afterwards."""
        if self._is_leader and self._lease is not None:
            # Fast path: assume our last write is still the current version (no GET).
            try:
                self._observe(await self._write(self._lease, self._spec_for(self._lease)))
                return True
            except ApiException as exc:
                if exc.status != 409:
                    raise
        for _ in range(_CONFLICT_RETRIES):
            lease = await self._get()
            try:
                if lease is None:
                    self._observe(await self._write(None, self._spec_for(None)))
                    return True
                self._observe(lease)
                holder = self._holder_of(lease)
                if holder and holder != self._identity and not self._expired(lease["spec"]):
                    return False
                self._observe(await self._write(lease, self._spec_for(lease)))
                return True
            except ApiException as exc:
                if exc.status != 409:  # 409: someone else wrote (or created) first: re-read
                    raise
                log.debug("%s: conflict on lease %s, re-reading", self._identity, self._name)
        return False

    async def _release(self) -> None:
        """Hand the lease back at once (client-go ReleaseOnCancel): empty holder, 1 s duration.

        Only while we still hold it; a 409 (e.g. a cancelled renewal's write landed after all)
        re-reads, so the hand-over stays immediate. Failures just let the lease lapse.
        """
        lease = self._lease
        try:
            async with asyncio.timeout(self._renew_deadline):
                for _ in range(_CONFLICT_RETRIES):
                    if lease is None or self._holder_of(lease) != self._identity:
                        return
                    now = format_micro_time(self._wall_clock())
                    spec = {
                        **lease["spec"],
                        "holderIdentity": "",
                        "leaseDurationSeconds": 1,
                        "acquireTime": now,
                        "renewTime": now,
                    }
                    try:
                        self._observe(await self._write(lease, spec))
                    except ApiException as exc:
                        if exc.status != 409:
                            raise
                        lease = await self._get()
                        continue
                    log.info(
                        "%s: released lease %s/%s", self._identity, self._namespace, self._name
                    )
                    return
        except Exception as exc:
            log.info("%s: cannot release lease %s: %s", self._identity, self._name, exc)

    @staticmethod
    def _holder_of(lease: Lease) -> str:
        return (lease.get("spec") or {}).get("holderIdentity") or ""

    # --- lease records ----------------------------------------------------------------

    def _spec_for(self, lease: Lease | None) -> dict[str, Any]:
        """The spec that makes us the holder, keeping fields we do not manage."""
        old = dict((lease or {}).get("spec") or {})
        now = format_micro_time(self._wall_clock())
        transitions = int(old.get("leaseTransitions") or 0)
        if lease is not None and old.get("holderIdentity") == self._identity:
            acquired = old.get("acquireTime") or now
        else:
            acquired = now
            if lease is not None:
                transitions += 1
        return {
            **old,
            "holderIdentity": self._identity,
            "leaseDurationSeconds": max(1, math.ceil(self._lease_duration)),
            "acquireTime": acquired,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _expired(self, spec: dict[str, Any]) -> bool:
        if self._clock() - self._observed_at > self._lease_duration:
            return True
        renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
        duration = spec.get("leaseDurationSeconds")
        if renewed is None or not isinstance(duration, int):
            return False
        return (self._wall_clock() - renewed).total_seconds() > duration

    def _observe(self, lease: Lease) -> None:
        self._lease = lease
        rv = (lease.get("metadata") or {}).get("resourceVersion")
        if rv != self._observed_rv:
            self._observed_rv = rv
            self._observed_at = self._clock()
        holder = self._holder_of(lease)
        if holder != self._holder:
            self._holder = holder
            if holder and holder != self._identity:
                log.info('"New leader elected" leader="%s" currentCandidate="%s" lease="%s/%s"',
                         holder, self._identity, self._namespace, self._name)
            else:
                log.info("lease %s/%s: holder is now %r", self._namespace, self._name, holder)
            if self._on_change is not None:
                try:
                    self._on_change(holder)
                except Exception:
                    log.exception("on_change callback failed")

    # --- API calls (the client is synchronous: run it in a thread) ---------------------

    async def _get(self) -> Lease | None:
        def call() -> Lease | None:
            try:
                response = self._api.read_namespaced_lease(
                    self._name,
                    self._namespace,
                    _preload_content=False,
                    _request_timeout=self._renew_deadline,
                )
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            # Unparsed (_preload_content=False): the JSON, not the client's V1Lease.
            return cast(Lease, json.loads(cast(Any, response).data))

        return await asyncio.to_thread(call)

    async def _write(self, lease: Lease | None, spec: dict[str, Any]) -> Lease:
        """Create (lease is None) or replace with the read resourceVersion (409 if stale)."""
        if lease is None:
            body: Lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": spec,
            }
            method, path = "POST", LEASE_PATH
        else:
            body = {**lease, "spec": spec}
            method, path = "PUT", LEASE_PATH + "/{name}"
        return await asyncio.to_thread(self._send, method, path, body)

    def _send(self, method: str, path: str, body: Lease) -> Lease:
        api_client = self._api.api_client
        params = {"namespace": self._namespace, "name": self._name}
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if not hasattr(api_client, "param_serialize"):
            # Older (python-legacy) clients send a dict body verbatim through the typed API.
            if method == "POST":
                response = self._api.create_namespaced_lease(
                    self._namespace,
                    cast(Any, body),
                    _preload_content=False,
                    _request_timeout=self._renew_deadline,
                )
            else:
                response = self._api.replace_namespaced_lease(
                    self._name,
                    self._namespace,
                    cast(Any, body),
                    _preload_content=False,
                    _request_timeout=self._renew_deadline,
                )
            return cast(Lease, json.loads(cast(Any, response).data))
        request = api_client.param_serialize(
            method=method,
            resource_path=path,
            path_params={k: v for k, v in params.items() if "{" + k + "}" in path},
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = api_client.call_api(*request, _request_timeout=self._renew_deadline)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return cast(Lease, json.loads(response.data))


__all__ = ["LeaderElector", "format_micro_time", "parse_time"]
