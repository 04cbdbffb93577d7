"""``train``: a training job (one run, or a hyper-parameter search's runs); it stores its
held-out metrics (``HeldOutEvaluation``), which the job view serves, and the job list lists
it."""

from app.jobs.kinds.base import JobKind
from app.jobs.results import HeldOutEvaluation

TRAIN = JobKind("train", order=0, results=HeldOutEvaluation, listed=True)
