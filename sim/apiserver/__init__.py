"""A Kubernetes API server emulator that the real `kubernetes` client and `kubectl` talk to.

Faithful in the behaviours the driver relies on (resourceVersions, 409s, watches and 410s,
finalizers, garbage collection, status subresources, patches, CRD schemas, RBAC), so that
tests against it mean something.
"""
