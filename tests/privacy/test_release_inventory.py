"""The release inventory (``app/privacy/inventory.py``, and the response schemas' own ``x-release``
annotations) covers everything that leaves the service, and nothing else: every property of
every response schema the OpenAPI document can reach, every variable of the report pages, every
structured log field, every value formatted into a log
message, and every Prometheus metric family. Something new without an entry fails here until
someone decides which mechanism releases it; an entry for something gone fails as stale. An
object whose keys the document leaves open (``dict[str, Any]``, a map keyed by names) must be
listed in ``OPEN_OBJECTS`` with a reason, or typed. Error members and response headers are
scanned in ``test_inventory_problems.py`` and ``test_inventory_headers.py``.
"""

import ast
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jinja2 import meta, nodes
from pydantic import BaseModel

from app.core.logs import JsonFormatter
from app.jobs import results
from app.main import create_app
from app.privacy.annotations import annotated_entries
from app.privacy.inventory import Inventory
from app.privacy.inventory_http import OPEN_OBJECTS
from app.privacy.releases import MECHANISMS, Release
from app.reports.html import ENV

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = create_app().openapi()  # building the app touches no database
COMPONENTS: dict[str, Any] = DOCUMENT["components"]["schemas"]
INVENTORY = Inventory(annotated_entries(DOCUMENT))  # the modules' entries and the schemas'
HTTP_METHODS = {"get", "put", "post", "delete", "patch"}
Field = tuple[str, tuple[str, ...]]  # (component, property path)


# --- the OpenAPI walk -------------------------------------------------------------------------

def _alternatives(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The schema's own shape and every allOf/anyOf/oneOf branch, flattened."""
    found = [schema]
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in schema.get(key, []):
            found += _alternatives(branch)
    return found


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    return {name: prop for branch in _alternatives(schema)
            for name, prop in branch.get("properties", {}).items()}


def _refs(schema: Any) -> set[str]:
    """Every component named anywhere inside ``schema``."""
    if isinstance(schema, dict):
        own = {schema["$ref"].rsplit("/", 1)[-1]} if "$ref" in schema else set()
        return own.union(*(_refs(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_refs(v) for v in schema))
    return set()


def _pure_ref(schema: dict[str, Any]) -> bool:
    """Only other components' objects (nested, nullable, in a list): classified there. A
    reference to a component without properties (an enum) is a value, classified here."""
    branches = [b for b in _alternatives(schema)
                if b.get("type") != "null" and not {"anyOf", "oneOf", "allOf"} & set(b)]
    return bool(branches) and all(_pure_ref_branch(b) for b in branches)


def _pure_ref_branch(branch: dict[str, Any]) -> bool:
    if "$ref" in branch:
        return bool(_properties(COMPONENTS[branch["$ref"].rsplit("/", 1)[-1]]))
    return branch.get("type") == "array" and _pure_ref(branch.get("items", {}))


def _response_roots() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(operationId, content type, schema) of every documented response body."""
    for path_item in DOCUMENT["paths"].values():
        for method, operation in path_item.items():
            if method not in HTTP_METHODS:
                continue
            for response in operation.get("responses", {}).values():
                for content_type, content in response.get("content", {}).items():
                    yield operation["operationId"], content_type, content.get("schema", {})


def released() -> tuple[set[Field], set[str], set[str]]:
    """(fields to classify, components reached, inline response bodies to classify)."""
    queue: list[str] = []
    inline: set[str] = set()
    for operation_id, content_type, schema in _response_roots():
        if content_type == "text/html":
            inline.add(f"response:{operation_id}:html")  # a report page: see the templates
        elif not _pure_ref(schema):
            inline.add(f"response:{operation_id}")
        queue += sorted(_refs(schema))
    fields: set[Field] = set()
    reached: set[str] = set()
    while queue:
        name = queue.pop()
        if name in reached:
            continue
        reached.add(name)
        for prop, schema in _properties(COMPONENTS[name]).items():
            queue += sorted(_walk_property(name, (prop,), schema, fields))
    return fields, reached, inline


def _walk_property(component: str, path: tuple[str, ...], schema: dict[str, Any],
                   fields: set[Field]) -> set[str]:
    """Add the property (or its inline sub-properties) to ``fields``; return the components
    it refers to."""
    if not _pure_ref(schema):
        nested = _properties(schema)
        if not nested:
            fields.add((component, path))
        for name, sub in nested.items():
            _walk_property(component, (*path, name), sub, fields)
    return _refs(schema)


FIELDS, REACHED, INLINE = released()


def _resolves(component: str, path: list[str]) -> bool:
    """Whether an entry's path names a property of ``component`` (not one reached through a
    nested component), or a key of a free-form object."""
    schema = COMPONENTS[component]
    depth = 0
    while depth < len(path):
        props = _properties(schema)
        # A property named with dots (a CDS Hooks extension, "dev.dpcrisis.model-id") spans
        # several parts of the entry's path: the longest name that is a property wins.
        end = next((e for e in range(len(path), depth, -1)
                    if ".".join(path[depth:e]) in props), None)
        if end is None:
            return depth > 0 and not props
        schema, depth = props[".".join(path[depth:end])], end
        if _pure_ref(schema):
            return False
    return True


def test_the_walk_reaches_the_api() -> None:
    assert {"ModelOut", "RiskResult", "JobPrivacyReport", "ReleaseInventory"} <= REACHED
    assert ("RiskResult", ("band",)) in FIELDS and "response:scorePatientFhir" in INLINE
    for where in ("ModelOut.metrics", "JobOut.metrics", "JobPrivacyReport.metrics",
                  "HeldOutMetrics.values"):  # typed (app.jobs.results), walked key by key
        component, prop = where.split(".")
        assert _pure_ref(COMPONENTS[component]["properties"][prop]), where


def _open(schema: dict[str, Any]) -> bool:
    """An object (or a list of them) whose keys the document does not enumerate."""
    return any((b.get("type") == "object" and not b.get("properties"))
               or (b.get("type") == "array" and _open(b.get("items", {})))
               for b in _alternatives(schema))


def _schema_at(component: str, path: tuple[str, ...]) -> dict[str, Any]:
    schema = COMPONENTS[component]
    for name in path:
        schema = _properties(schema)[name]
    return schema


OPEN = {f"{c}.{'.'.join(p)}" for c, p in FIELDS if _open(_schema_at(c, p))}


def test_every_open_object_is_listed_with_a_reason() -> None:
    """A ``dict[str, Any]`` in a response would let any key through classified as a whole: each
    one (and each map keyed by names) is listed with why its keys may stay open."""
    assert OPEN, "no open object found: the check would be vacuous"
    assert not OPEN - set(OPEN_OBJECTS), "new open objects in responses: type them " \
        "or list them in OPEN_OBJECTS with a reason:\n" + "\n".join(sorted(OPEN - set(
            OPEN_OBJECTS)))
    assert not set(OPEN_OBJECTS) - OPEN, "stale OPEN_OBJECTS entries"
    assert all(reason for reason in OPEN_OBJECTS.values())


@pytest.mark.parametrize("model", [results.HeldOutEvaluation, results.AuditResults])
def test_each_stored_metric_is_a_classified_field(model: type[BaseModel]) -> None:
    """The stored metrics are typed: the walk reaches every key; the held-out metrics' only
    open objects are maps keyed by the public schema's groupings (the audit's results, on
    public data only, keep theirs: OPEN_OBJECTS)."""
    name = model.__name__
    assert name in REACHED
    for field in model.model_fields:
        assert (name, (field,)) in FIELDS or _pure_ref(_schema_at(name, (field,))), field
    held_out = {w for w in OPEN if w.startswith(("HeldOut", "Calibration"))}
    assert held_out == {"HeldOutRelease.groupings", "HeldOutHistograms.by_grouping"}


def test_every_response_field_names_its_release() -> None:
    missing = sorted(f"{c}.{'.'.join(p)}" for c, p in FIELDS
                     if INVENTORY.field_entry(c, p) is None)
    missing += sorted(key for key in INLINE if key not in INVENTORY.by_where)
    assert not missing, "response fields without a release-inventory entry:\n" + "\n".join(
        missing)


def test_no_response_entry_is_stale() -> None:
    stale = []
    for where in INVENTORY.by_where:
        if where.startswith("response:"):
            if where not in INLINE:
                stale.append(where)
        elif ":" not in where:
            component, *path = where.split(".")
            if component not in REACHED or not _resolves(component, path):
                stale.append(where)
    assert not stale, "inventory entries for response fields that no response has:\n" + \
        "\n".join(stale)


def test_entries_are_well_formed() -> None:
    assert not INVENTORY.duplicates()
    assert set(MECHANISMS) == set(Release)
    for e in INVENTORY.entries:
        assert bool(e.releases) != bool(e.see), e
        if e.see.startswith("template:"):
            assert (ROOT / "app/reports/templates" / e.see.split(":")[1]).exists(), e
        elif e.see:
            assert e.see in COMPONENTS, e


# --- the report pages -------------------------------------------------------------------------

TEMPLATES = sorted(p.name for p in (ROOT / "app/reports/templates").glob("*.html"))


def _chain(node: nodes.Node) -> tuple[str, ...] | None:
    """``report.coverage.covers`` as ("report", "coverage", "covers"); None if not static."""
    parts: list[str] = []
    while isinstance(node, nodes.Getattr | nodes.Getitem):
        if isinstance(node, nodes.Getattr):
            parts.append(node.attr)
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            parts.append(node.arg.value)
        else:
            return None
        node = node.node
    return (node.name, *reversed(parts)) if isinstance(node, nodes.Name) else None


def _chains(node: nodes.Node) -> Iterator[tuple[str, ...]]:
    """The longest static attribute chains, and the bare names, read anywhere in ``node``."""
    if isinstance(node, nodes.Getattr | nodes.Getitem) and (chain := _chain(node)):
        yield chain
        return
    if isinstance(node, nodes.Name) and node.ctx == "load":
        yield (node.name,)
        return
    for child in node.iter_child_nodes():
        yield from _chains(child)


def page_chains(template: str) -> set[tuple[str, ...]]:
    """What the page reads from the values Python renders it with (not its macros)."""
    tree = ENV.parse(ENV.loader.get_source(ENV, template)[0])  # type: ignore[union-attr]
    imported = {n if isinstance(n, str) else n[1]
                for node in tree.find_all(nodes.FromImport) for n in node.names}
    free = meta.find_undeclared_variables(tree) - imported
    return {chain for chain in _chains(tree) if chain[0] in free}


def _page_problem(template: str, chain: tuple[str, ...]) -> str | None:
    e = INVENTORY.template_entry(template, chain)
    if e is None:
        return "no entry"
    if not e.see:
        return None
    depth = len(e.where.split(":", 2)[2].split("."))
    component, path = e.see, list(chain[depth:])
    for key in chain[depth:]:
        props = _properties(COMPONENTS[component])
        if not props:  # a free-form object: classified as a whole
            break
        if key not in props:
            return f"{component} has no property {key!r}"
        if _pure_ref(props[key]):
            component, path = sorted(_refs(props[key]))[0], path[1:]
    if path and INVENTORY.field_entry(component, path) is None:
        return f"{component}.{'.'.join(path)} has no entry"
    return None


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_page_variable_names_its_release(template: str) -> None:
    problems = {".".join(c): p for c in page_chains(template)
                if (p := _page_problem(template, c)) is not None}
    assert not problems, f"unclassified values on {template}: {problems}"


def test_no_page_entry_is_stale() -> None:
    used = {(t, chain[:n]) for t in TEMPLATES for chain in page_chains(t)
            for n in range(1, len(chain) + 1)}
    stale = [where for where in INVENTORY.by_where if where.startswith("template:")
             and (where.split(":")[1], tuple(where.split(":", 2)[2].split("."))) not in used]
    assert not stale, stale


def test_report_models_of_the_pages_are_response_schemas() -> None:
    for where, e in INVENTORY.by_where.items():
        if where.startswith("template:") and e.see:
            assert e.see in REACHED, e


# --- logs and metrics -------------------------------------------------------------------------

def test_every_structured_log_field_names_its_release() -> None:
    record = logging.LogRecord("dpcrisis.test", logging.ERROR, __file__, 1, "job %s", (7,),
                               None)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record.exc_info = sys.exc_info()
    record.request_id, record.job_id, record.worker_id = "r-1", 7, "w-1"
    logged = set(json.loads(JsonFormatter().format(record)))
    classified = {w.removeprefix("log:") for w in INVENTORY.by_where if w.startswith("log:")}
    assert logged == classified


LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical"}
LOGGERS = {"logger", "log", "logging", "LOG", "_log"}


def _is_log_call(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in LOG_METHODS):
        return False
    target = node.func.value
    return (isinstance(target, ast.Name) and target.id in LOGGERS) or (
        isinstance(target, ast.Call) and ast.unparse(target.func).endswith("getLogger"))


def log_arguments() -> dict[str, list[str]]:
    """Each expression formatted into a log message in app/ and worker/ -> where."""
    found: dict[str, list[str]] = {}
    sources = [*ROOT.joinpath("app").rglob("*.py"), *ROOT.joinpath("worker").rglob("*.py")]
    for path in sorted(sources):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not _is_log_call(node):
                continue
            assert isinstance(node, ast.Call)
            message, *values = node.args or [ast.Constant("")]
            if isinstance(message, ast.JoinedStr):
                values += [v.value for v in message.values if isinstance(v, ast.FormattedValue)]
            elif not isinstance(message, ast.Constant):
                values.append(message)
            extra = [k for k in node.keywords if k.arg == "extra"]
            values += [v for k in extra if isinstance(k.value, ast.Dict) for v in k.value.values
                       if v is not None]
            for value in values:
                found.setdefault(ast.unparse(value), []).append(
                    f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_value_formatted_into_a_log_line_names_its_release() -> None:
    found = log_arguments()
    assert found, "no logging call found: the scan would be vacuous"
    classified = {w.removeprefix("log-arg:") for w in INVENTORY.by_where
                  if w.startswith("log-arg:")}
    missing = {expr: where for expr, where in found.items() if expr not in classified}
    assert not missing, f"log arguments without a release-inventory entry: {missing}"
    assert not classified - set(found), "stale log-arg entries"
    assert not [e for w, e in INVENTORY.by_where.items() if w.startswith("log-arg:")
                and Release.DP_EVALUATION in e.releases], "no metric is logged"


def test_every_metric_family_names_its_release(client: TestClient) -> None:
    assert client.get("/v1/jobs/999999").status_code == 404  # an error and a latency observed
    families = {m.name for m in client.app.state.metrics_registry.collect()}  # type: ignore[attr-defined]
    assert "dpcrisis_http_errors" in families
    missing = sorted(f for f in families if INVENTORY.metric_entry(f) is None)
    assert not missing, missing
    source = "".join(p.read_text() for p in ROOT.joinpath("app/observability").glob("*.py"))
    stale = [w for w in INVENTORY.by_where
             if w.startswith("metric:") and f'"{w.removeprefix("metric:")}"' not in source]
    assert not stale, stale


# --- the endpoint -----------------------------------------------------------------------------

def test_the_inventory_endpoint_serves_every_entry(client: TestClient) -> None:
    response = client.get("/v1/privacy/inventory")
    assert response.status_code == 200, response.text
    body = response.json()
    assert {k["kind"] for k in body["kinds"]} == {k.value for k in Release}
    assert all(k["mechanism"] for k in body["kinds"])
    assert len(body["entries"]) == len(INVENTORY.entries)
    by_where = {e["where"]: e for e in body["entries"]}
    assert by_where["HeldOutEvaluation.roc_auc"]["releases"] == ["dp_evaluation"]
    assert by_where["CalibrationRecord.slope"]["releases"] == ["dp_calibration"]
    assert by_where["CalibrationRecord.rows"]["releases"] == ["public_by_convention"]
    assert by_where["RiskResult.probability"]["releases"] == ["dp_training"]
