"""Every operation's id is its route function's name in camelCase: unique, and readable as the
method name of a generated client (``client.createJob(...)``)."""

import re

from app.main import create_app

CAMEL_CASE = re.compile(r"^[a-z]+(?:[A-Z][a-z0-9]*)*$")
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def operation_ids() -> list[str]:
    document = create_app().openapi()  # building the app touches no database
    return [
        operation["operationId"]
        for path_item in document["paths"].values()
        for method, operation in path_item.items()
        if method in HTTP_METHODS
    ]


def test_operation_ids_are_unique_camel_case_identifiers() -> None:
    ids = operation_ids()
    assert ids, "the schema has no operations"
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert not [i for i in ids if not CAMEL_CASE.fullmatch(i)]


def test_known_operations_have_readable_ids() -> None:
    ids = set(operation_ids())
    expected = {"createJob", "getJob", "listJobs", "cancelJob", "getJobPrivacyReport",
                "createDataset", "listDatasets", "getDataset", "getDatasetPrivacyReport",
                "createAudit", "listAudits", "listModels", "activateModel", "rollbackModel",
                "scorePatient", "scorePatients", "createKey", "listAuditEvents"}
    assert expected <= ids, sorted(expected - ids)
