"""``train``: one training run, or a search's runs (``worker.search``), of the fit plan its
payload carries (``worker.tasks.TrainPayload``, read from the job's plan columns and training
request by ``parse_training``)."""

from app.jobs.kinds.train import TRAIN
from worker.handlers import task_handler
from worker.search import run_train
from worker.tasks import parse_training

task_handler(TRAIN, parse=parse_training)(run_train)
