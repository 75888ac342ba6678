"""Files the agent ships: the IMEX daemon config template."""

from importlib import resources

IMEXD_TEMPLATE = "compute-domain-daemon-config.tmpl.cfg"


def imexd_template() -> bytes:
    """The IMEX config template that daemon claims get as `/imexd/imexd.cfg.tmpl`."""
    return (resources.files(__package__) / IMEXD_TEMPLATE).read_bytes()
