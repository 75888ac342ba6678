"""The lightweight cluster controller."""
