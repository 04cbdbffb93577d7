"""Operational metrics: the Prometheus ``/metrics`` endpoint and the HTTP timing middleware."""
