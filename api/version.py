"""The project's version, shared by every entry point and the package metadata."""

__version__ = "0.1.0"


def version_line(program: str) -> str:
    """One line for `<program> version`, the form admins paste into bug reports."""
    return f"{program} {__version__}"
