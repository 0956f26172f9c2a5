"""Prometheus metrics and the HTTP endpoints."""
