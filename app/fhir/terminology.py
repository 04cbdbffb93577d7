"""The code systems this service defines, as FHIR R4 ``CodeSystem`` resources, served at the
path of their canonical URL (``https://dpcrisis.dev/fhir/CodeSystem/risk-band`` at
``/fhir/CodeSystem/risk-band``), so a deployment at that address resolves its own codes.

- ``risk-band``: the service's risk bands, the second coding of a RiskAssessment's
  ``qualitativeRisk``, of a probability of whatever outcome the model declares. Each model has
  its own cut-offs (declared with its outcome; ``app.bands``): the RiskAssessment's coding says
  the model's own.
- ``cds-topic``: the topics of CDS Hooks cards (``source.topic``) that are not an outcome's own
  coding (``app.fhir.codes.topic_of``): ``outcome-risk`` for an outcome declared without a
  code, and the built-in schema's topic, worded by that schema.

A schema's own code systems are read by id or found by URL, never listed (a search without
``url`` lists only the two above), so no caller without a key enumerates the clinics'
declarations:

- ``schema-features-<16 hex digits>``: a declared schema's features without a declared code,
  for each schema a stored model was trained on (the digits start its schema hash);
- the built-in schema's uncoded features (published before schemas, its ``FEATURE_SYSTEM``)
  and its declared outcome, worded by it (``app.datasets.schema.built_in_schema``).

Every definition is a public declaration (band rule, schema labels and bounds), never a
statistic of any data.
"""

import re
from typing import Any

from sqlalchemy.orm import Session

from app.bands import Band
from app.core.errors import NotFound
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA, FEATURE_SYSTEM_NAME
from app.datasets.schema.dataset_schema import DatasetSchema, outcome_words
from app.fhir.codes import (
    BAND_SYSTEM,
    BUILT_IN_TOPIC,
    FEATURE_SYSTEM,
    OUTCOME_TOPIC,
    SCHEMA_KEY_DIGITS,
    TOPIC_SYSTEM,
    Topic,
    codes_of,
    local_system,
)
from app.registry import service as registry_service
from app.scoring.patients import rule_of

VERSION = "1"
PUBLISHER = "dpcrisis"
BASE = BAND_SYSTEM.rsplit("/", 1)[0] + "/"
"""Where the service's CodeSystems live: ``.../fhir/CodeSystem/``; each one's id follows."""
SCHEMA_ID = re.compile(rf"schema-features-([0-9a-f]{{{SCHEMA_KEY_DIGITS}}})")


class UnknownCodeSystem(NotFound):
    kind, title = "code-system-not-found", "CodeSystem not found"


def _band_concepts() -> list[dict[str, Any]]:
    rule = {
        Band.LOW: "below the model's low_medium cut-off",
        Band.MEDIUM: "from the model's low_medium cut-off up to, not including, its "
                     "medium_high cut-off",
        Band.HIGH: "from the model's medium_high cut-off up",
    }
    return [{"code": str(band), "display": f"{band.capitalize()} risk band",
             "definition": f"A probability of the model's declared outcome {rule[band]}."}
            for band in Band]


def _topic_concept(topic: Topic, definition: str) -> dict[str, Any]:
    return {"code": topic.code, "display": topic.display, "definition": definition}


def _code_system(cid: str, url: str, name: str, title: str, description: str,
                 concepts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resourceType": "CodeSystem", "id": cid, "url": url, "version": VERSION,
        "name": name, "title": title, "status": "active", "experimental": False,
        "publisher": PUBLISHER, "description": description, "caseSensitive": True,
        "content": "complete", "count": len(concepts), "concept": concepts,
    }


def _feature_concepts(schema: DatasetSchema) -> list[dict[str, Any]]:
    """One concept per feature coded in the schema's local system: its name, label and rule."""
    return [{"code": c.code, "display": c.display,
             "definition": f"{c.display}, as the model reads it: {rule_of(c.feature)}."}
            for c in codes_of(schema) if not c.declared]


def _topics(session: Session) -> list[dict[str, Any]]:
    """The card topics in use: the neutral one, and the built-in schema's own (which EHR rules
    filter on) only while a model of that schema is stored, so a service of other outcomes
    describes none of the generator's."""
    topics = [_topic_concept(OUTCOME_TOPIC, "A card about the probability of the outcome the "
                                            "scoring model declares without a code; the card "
                                            "names that outcome.")]
    if registry_service.built_in_schema_in_use(session=session):
        words = BUILT_IN_SCHEMA.outcome.description or outcome_words(BUILT_IN_SCHEMA)
        topics.append(_topic_concept(BUILT_IN_TOPIC,
                                     f"Cards about the built-in schema's outcome: {words}"))
    return topics


def code_systems(session: Session) -> dict[str, dict[str, Any]]:
    """The service-wide CodeSystems by id: what a search without ``url`` lists."""
    return {
        "risk-band": _code_system(
            "risk-band", BAND_SYSTEM, "DpcrisisRiskBand", "dpcrisis risk bands",
            "The service's risk bands of a probability of the model's declared outcome. "
            "Cut-offs belong to each model (declared with its outcome; each cut-off belongs to "
            "the band above it); a RiskAssessment's coding states the scoring model's own.",
            _band_concepts()),
        "cds-topic": _code_system(
            "cds-topic", TOPIC_SYSTEM, "DpcrisisCdsTopic", "dpcrisis CDS Hooks card topics",
            "Topics of the service's CDS Hooks cards whose outcome has no code of its own (an "
            "outcome declared with a code is the topic itself); the same for every model and "
            "version of that outcome.", _topics(session)),
    }


def _built_in_systems() -> dict[str, dict[str, Any]]:
    """The built-in schema's own CodeSystems by id (its uncoded features, its outcome): like
    any schema's, read by id or found by URL, never listed."""
    features = FEATURE_SYSTEM.removeprefix(BASE)
    systems = {features: _code_system(
        features, FEATURE_SYSTEM, FEATURE_SYSTEM_NAME,
        "Features of the built-in schema",
        "The built-in synthetic generator's schema's features without a clinical code of "
        "their own: each code is the feature's name.", _feature_concepts(BUILT_IN_SCHEMA))}
    outcome = BUILT_IN_SCHEMA.outcome.code
    if outcome is not None and outcome.system.startswith(BASE):
        cid = outcome.system.removeprefix(BASE)
        words = outcome_words(BUILT_IN_SCHEMA)
        systems[cid] = _code_system(
            cid, outcome.system, "DpcrisisBuiltInOutcome", "Outcome of the built-in schema",
            "The outcome the built-in synthetic generator's schema declares.",
            [{"code": outcome.code, "display": outcome.display or words,
              "definition": BUILT_IN_SCHEMA.outcome.description or words}])
    return systems


def _schema_system(session: Session, cid: str) -> dict[str, Any] | None:
    """The local CodeSystem of a stored model's declared schema, by its id; None if none."""
    key = SCHEMA_ID.fullmatch(cid)
    if key is None:
        return None
    schema = registry_service.schema_hashed(session=session, prefix=key.group(1))
    if schema is None or local_system(schema) != BASE + cid:
        return None
    return _code_system(
        cid, BASE + cid, f"DpcrisisSchemaFeatures{key.group(1)}", "Features of a declared schema",
        "The features of one declared dataset schema without a clinical code of their own: "
        "each code is the feature's name. Every model trained on that declaration uses it.",
        _feature_concepts(schema))


def _unlisted(session: Session, cid: str) -> dict[str, Any] | None:
    return _built_in_systems().get(cid) or _schema_system(session, cid)


def read(*, session: Session, code_system_id: str) -> dict[str, Any]:
    """One CodeSystem. Raises UnknownCodeSystem (404)."""
    found = code_systems(session).get(code_system_id) or _unlisted(session, code_system_id)
    if found is None:
        raise UnknownCodeSystem(f"no CodeSystem {code_system_id!r}; this server has "
                                + ", ".join(sorted(code_systems(session)))
                                + " and the code systems its models' schemas name")
    return found


def search(*, session: Session, url: str | None) -> dict[str, Any]:
    """``GET /fhir/CodeSystem?url=...``: a searchset Bundle of the matching CodeSystems (a
    schema's own only by its URL)."""
    found = [c for c in code_systems(session).values() if url is None or c["url"] == url]
    if not found and url is not None and url.startswith(BASE):
        unlisted = _unlisted(session, url.removeprefix(BASE))
        found = [] if unlisted is None else [unlisted]
    return {"resourceType": "Bundle", "type": "searchset", "total": len(found),
            "entry": [{"fullUrl": c["url"], "resource": c, "search": {"mode": "match"}}
                      for c in found]}
