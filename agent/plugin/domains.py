"""The ComputeDomains this node has to do with, by uid, without watching every one.

An agent that watched all ComputeDomains received every status write of every domain: at
72 nodes half of all watch deliveries went to agents, and each write of a domain's status
(whose size grows with its node count) went to all of its nodes. The agent needs a domain
only when a claim of it is prepared here: its namespace and name for the checks and the
daemon's environment, and whether it still exists. So it looks a domain up when a claim
names it (one LIST, in the claim's namespace when that is known, else in every
namespace), keeps what it found, and reads it again (a GET) when it must decide on
liveness: the periodic cleanup and the label keeper's repair. Readiness, the only thing
that changes often, comes from the domain's clique, watched alone (cluster.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from api import names
from api.computedomain import StoredComputeDomain
from api.objects import K8sObject
from runtime.kubecall import call

log = logging.getLogger(__name__)


def _slim(cd: Mapping[str, Any]) -> StoredComputeDomain:
    """What the agent uses of a domain: all but its status, whose size grows with the
    domain (left out before parsing, so it is never parsed either)."""
    return StoredComputeDomain.from_dict({k: v for k, v in cd.items() if k != "status"})


def _items(listing: object) -> list[Mapping[str, Any]]:
    """The items of a list response (the API's JSON)."""
    items = listing.get("items") if isinstance(listing, Mapping) else None
    return [i for i in items or () if isinstance(i, Mapping)]


class DomainDirectory:
    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._known: dict[str, StoredComputeDomain] = {}  # uid -> as last read, less status
        self._gone: set[str] = set()  # uids asked for that the API server did not have
        self.lists = 0  # LISTs made (tests and logs)
        self.gets = 0

    def get(self, uid: str) -> StoredComputeDomain | None:
        """The domain as last read, None if it is not known (or known to be gone)."""
        return self._known.get(uid)

    def live(self, uid: str) -> bool:
        """Known, and not being deleted (as last read)."""
        cd = self._known.get(uid)
        return cd is not None and not cd.deleting

    def maybe_live(self, uid: str) -> bool:
        """Live, or not read yet (e.g. after a restart): worth a `refresh` to find out."""
        return self.live(uid) or (uid not in self._known and uid not in self._gone)

    async def lookup(self, uid: str, namespace: str | None = None
                     ) -> StoredComputeDomain | None:
        """The domain with `uid`: from what is known, else by listing `namespace` (None:
        every namespace). A domain found in another namespace than `namespace` is found
        too (by a second, cluster-wide list), so the caller can say so."""
        if uid in self._known:
            return self._known[uid]
        found = await self._list(uid, namespace)
        if found is None and namespace is not None:
            found = await self._list(uid, None)
        return found

    async def refresh(self, uids: Iterable[str]) -> None:
        """Read these domains again: a GET for each one known by name, one cluster-wide LIST
        for the others. A domain that is gone is forgotten."""
        unknown = []
        for uid in dict.fromkeys(uids):
            cd = self._known.get(uid)
            if cd is None:
                unknown.append(uid)
                continue
            self.gets += 1
            try:
                got = await call(self._custom.get_namespaced_custom_object, names.GROUP,
                                 names.VERSION, cd.namespace, names.PLURAL_COMPUTE_DOMAINS,
                                 cd.name, _request_timeout=20)
                fresh = _slim(got) if isinstance(got, Mapping) else None
            except ApiException as err:
                if err.status != 404:
                    raise
                fresh = None
            if fresh is None or fresh.uid != uid:  # gone, or deleted and created again
                self._known.pop(uid, None)
                self._gone.add(uid)
            else:
                self._known[uid] = fresh
        if unknown:
            await self._list(None, None, want=set(unknown))

    async def _list(self, uid: str | None, namespace: str | None, *,
                    want: set[str] | None = None) -> StoredComputeDomain | None:
        """List (served from the API server's cache: resourceVersion 0) and remember the
        domains asked for: `uid`, or every uid in `want`."""
        self.lists += 1
        args = (names.GROUP, names.VERSION)
        if namespace is None:
            listing = await call(self._custom.list_cluster_custom_object, *args,
                                 names.PLURAL_COMPUTE_DOMAINS, resource_version="0",
                                 _request_timeout=30)
        else:
            listing = await call(self._custom.list_namespaced_custom_object, *args, namespace,
                                 names.PLURAL_COMPUTE_DOMAINS, resource_version="0",
                                 _request_timeout=30)
        wanted = want if want is not None else {str(uid)}
        found = None
        for item in _items(listing):
            cd_uid = K8sObject.from_dict(item).uid  # its metadata only: most are not wanted
            if cd_uid in wanted:
                self._known[cd_uid] = _slim(item)
                self._gone.discard(cd_uid)
                if cd_uid == uid:
                    found = self._known[uid]
        if namespace is None:  # a cluster-wide list is the whole truth
            self._gone.update(u for u in wanted if u not in self._known)
        return found
