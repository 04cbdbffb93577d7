"""``federated``: this clinic's part in a federation's rounds (``app.federation``); it stores
held-out metrics and is listed as a training job is, and commits each round's spend as it
goes."""

from app.jobs.kinds.base import JobKind
from app.jobs.results import HeldOutEvaluation

FEDERATED = JobKind("federated", order=4, results=HeldOutEvaluation, listed=True,
                     charged_ahead=True)
