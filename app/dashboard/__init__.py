"""The clinician dashboard: scoring and privacy pages served by the service itself."""
