"""ldpfleet: local differential privacy telemetry for device fleets."""


def _installed_version() -> str:
    """The version of the installed distribution (pyproject.toml's `version`, from the package
    metadata pip wrote), or "0+unknown" for a source tree that was never installed."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("ldpfleet")
    except (ImportError, PackageNotFoundError):
        return "0+unknown"


__version__ = _installed_version()
