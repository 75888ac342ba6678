"""`compute-domain-agent diagnose`: follow one ComputeDomain's evidence chain through the
API, boundary by boundary, and name the first one that is broken (read-only)."""
