"""Patients: the keyed parts of each record, the patient index and the patient spaces.

Each record's part (a keyed PRF of its id), the organisation's index of which block each
patient is in (segments, files, folding), a generator seed's space, the rows a release reads
once the per-patient filter left patients out, declared ids and the per-patient budget.
"""
