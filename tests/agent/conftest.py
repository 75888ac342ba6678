"""Fixtures shared by the plugin tests (`short_dir` comes from tests/conftest.py).

`plugin_env` imports as a top-level module: pytest puts this directory (no `__init__.py`)
on sys.path for this conftest and the test modules next to it.
"""

from plugin_env import cluster  # noqa: F401  (a fixture, registered by importing it)
