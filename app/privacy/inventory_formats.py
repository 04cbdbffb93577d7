"""The release inventory of the scoring answers in their other media types (``app.formats``).

A FHIR RiskAssessment or a CSV row carries the fields of the JSON answer it renders
(``RiskResult``, ``RiskBatchResult``: the DP model's scores, the caller's own inputs and ids,
the model's ledger statement), so it releases what they do, and nothing more.
"""

from app.privacy.releases import Entry, Release, entry

KINDS = (Release.DP_TRAINING, Release.PUBLIC_INPUT, Release.LEDGER)

FORMAT_ENTRIES: list[Entry] = [
    entry("response:scorePatient", KINDS,
          "the answer as a FHIR RiskAssessment or CSV (Accept): RiskResult's fields"),
    entry("response:scorePatients", KINDS,
          "the answers as CSV rows (Accept): RiskBatchResult's fields"),
]
