"""Fixtures the controller tests share."""

import pytest
from controller_env import DRIVER_NS, Api


@pytest.fixture
def api(k8s, project_crds) -> Api:
    """The emulator's API, as the admin, with the driver namespace created."""
    api = Api(k8s)
    api.core.create_namespace({"metadata": {"name": DRIVER_NS}})
    return api
