"""IMEX supervision: what runs in the per-ComputeDomain daemon pod (and later inside the agent)."""
