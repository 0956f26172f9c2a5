"""rag-monitor: watches the quality of a production RAG service."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rag-monitor")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
