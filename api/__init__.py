"""The contract every part of the driver shares.

Exact strings, CR types, opaque configs, feature gates, IMEX settings and the
kubelet gRPC protos live here and nowhere else. Nothing in `api` imports other
project packages.
"""
