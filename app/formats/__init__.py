"""Score output formats: one renderer per media type, chosen by the request's ``Accept``."""
