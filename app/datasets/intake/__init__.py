"""Intake: an uploaded table from its spooled bytes to a validated, stored table.

Spooled with its guards, queued, read batch by batch against the declared schema (CSV and
Parquet, the per-value and id rules, Parquet's page bounds), fingerprinted and kept as sent,
and read back exactly as it was accepted. Nothing here knows a patient space.
"""
