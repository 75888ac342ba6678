"""Resilience and security tests start real agents with the plugin tests' helpers."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))

from plugin_env import cluster  # noqa: F401  (a fixture, registered by importing it)
