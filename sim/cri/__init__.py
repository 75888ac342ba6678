"""A CRI v1 container runtime for the simulated nodes, so the upstream kubelet can run pods.

The kubelet talks to it over the Container Runtime Interface (RuntimeService and
ImageService on a unix socket per node, https://github.com/kubernetes/cri-api); the
containers it starts are the sim's sandboxed processes (sim/cluster/sandbox.py).
"""
