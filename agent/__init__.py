"""The node agent: kubelet plugin, IMEX supervision, host IMEX probing."""
