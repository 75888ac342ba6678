"""The one exception type the CDI library raises for malformed input."""


class CDIError(ValueError):
    """A CDI name, spec or spec file is malformed, inconsistent or unresolvable.

    It subclasses ValueError so callers that treat all bad input alike need no
    CDI-specific handler, while callers that care can tell CDI problems apart.
    """
