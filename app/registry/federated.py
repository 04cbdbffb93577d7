"""A federated model's clause in its privacy statement (``app.federation``): FHIR notes, CDS
Hooks cards and the dashboard repeat the statement, so each names the model as federated."""

from app.privacy.figures import epsilon_text
from app.registry.models import TrainedModel


def federation_clause(model: TrainedModel) -> str:
    """A federated model says so, with the federation's statement (the worst clinic's), and
    what it is not: each clinic's ledger charges only its own records, so a patient treated
    at several clinics has the composition of their charges."""
    federation = (model.metrics or {}).get("federation")
    if not isinstance(federation, dict):
        return ""
    epsilon, delta = federation.get("federation_epsilon"), federation.get("federation_delta")
    worst = ("" if epsilon is None or delta is None else
             f"; the worst clinic's guarantee is ({epsilon_text(epsilon)}, {delta:g})")
    summed = (", summed under secure aggregation" if federation.get("secure_aggregation")
              else "")
    return (f" It is a federated model of {federation['name']} ({len(federation['sites'])} "
            f"clinics, {federation['rounds_run']} rounds averaging each clinic's DP "
            f"releases{summed}): this clinic's patients are covered by the statement above "
            f"for their records here{worst}. A patient treated at several of its clinics is "
            "charged at each, and their guarantee is the composition of those clinics' (at "
            "most the sum of their epsilons and of their deltas).")
