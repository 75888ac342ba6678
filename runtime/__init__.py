"""Runtime the agent and the controller share: Kubernetes calls and informers, Events, the
resource.k8s.io and core/v1 clients, logging, command-line helpers and node matching.

It may import `api` (the contract) and nothing else of ours; the agent and the controller
may import it but never each other (tests/unit/test_layering.py).
"""
