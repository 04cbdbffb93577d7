"""A dataset's declared schema: its columns, public bounds, outcome and encoding.

It reads nothing of intake or patients (an import contract says so): scaling, explanations,
FHIR and CDS Hooks read a model's schema without pulling in the upload path.
"""
