"""The DRA kubelet plugin: registration, DRA gRPC, ResourceSlice, claim preparation."""
