"""`rag-monitor demo`: everything on one machine, no external services."""
