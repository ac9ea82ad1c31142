"""fedxab: federated and distributed black-box optimization with differential privacy."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fedxab")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
