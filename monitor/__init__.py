"""rag-monitor: watches the quality of a production RAG service."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # `__version__` is looked up when asked for: importlib.metadata costs tens of milliseconds,
    # which every command would pay before parsing its arguments.
    if name != "__version__":
        raise AttributeError(f"module 'monitor' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rag-monitor")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0.0.0+unknown"
