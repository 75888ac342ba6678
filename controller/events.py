"""Kubernetes Events on ComputeDomains, so `kubectl describe computedomain` tells an admin
why a domain is stuck; a repeated event bumps its count instead of piling up."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from api import names
from api.objects import K8sObject
from runtime.kubecall import call

log = logging.getLogger(__name__)
COMPONENT = "compute-domain-controller"


class EventRecorder:
    def __init__(self, api: client.ApiClient, host: str) -> None:
        self._core = client.CoreV1Api(api)
        self._host = host
        self._recent: dict[tuple[str, str, str], tuple[str, int]] = {}

    async def warning(self, obj: K8sObject, reason: str, message: str) -> None:
        key = (obj.uid, reason, message)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            if key in self._recent:
                name, count = self._recent[key]
                patch = {"count": count + 1, "lastTimestamp": now}
                await call(self._core.patch_namespaced_event, name, obj.namespace, patch)
                self._recent[key] = (name, count + 1)
                return
            event = {
                "metadata": {"generateName": f"{obj.name}-"},
                "involvedObject": {"apiVersion": names.API_VERSION,
                                   "kind": names.KIND_COMPUTE_DOMAIN, "name": obj.name,
                                   "namespace": obj.namespace, "uid": obj.uid,
                                   "resourceVersion": obj.resource_version},
                "reason": reason, "message": message, "type": "Warning", "count": 1,
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": COMPONENT, "host": self._host},
                "reportingComponent": COMPONENT, "reportingInstance": self._host,
            }
            created = await call(self._core.create_namespaced_event, obj.namespace, event)
            self._recent[key] = (created.metadata.name or "", 1)
        except ApiException as err:  # events are best effort
            self._recent.pop(key, None)
            log.info("could not record event %s on %s: %s", reason, obj.name, err.reason)

    def forget(self, uid: str) -> None:
        for key in [k for k in self._recent if k[0] == uid]:
            del self._recent[key]
