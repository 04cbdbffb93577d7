"""The worker's handler of each kind of job, found in this package: one module each.

Each module registers its kind's handler with ``worker.handlers.task_handler``: the kind's word
(declared in its module of ``app.jobs.kinds``), how its typed payload is read from the claimed
job row (``parse``) and the task that runs it. ``worker.handlers.handlers`` imports every
module here before the first dispatch, so a new kind's handler is its module here and nothing
else in the worker.
"""
