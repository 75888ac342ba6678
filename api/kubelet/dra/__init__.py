"""DRA node service protos."""
