"""The parent side of a multi-process job: start ``torchrun``, relay progress, read the model.

The worker process keeps the database and the ledger; the ranks (``worker.distributed``) only
train. They talk through files in a private temporary directory (mode 0700, removed after):
rank 0 appends one JSON line per epoch with the accountant history, which this side turns into
the usual ``on_epoch`` calls (so ledger commits, cancel checks and lease renewals happen as for
one process), and at report epochs rank 0 waits for the decision this side appends.
"""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from app.datasets.schema.encoding import BUILT_IN_ENCODER, Encoder
from app.registry.network import build_network
from worker import distributed
from worker.training import EpochCallback, TrainingResult, TrainingSpec, padded_rows

logger = logging.getLogger("dpcrisis.worker")

ROOT = Path(__file__).resolve().parents[1]  # where ``-m worker.distributed`` resolves
POLL_S = 0.01
STOP_GRACE_S = 10.0
LOG_TAIL_CHARS = 2000


class DistributedTrainingFailed(RuntimeError):
    """``torchrun`` or one of its ranks failed; the job fails (its charge stays)."""


def backend_for(device: torch.device, world_size: int) -> str:
    """NCCL with one GPU per rank when there are enough GPUs; otherwise gloo on the CPU."""
    if device.type == "cuda" and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def train_distributed(
    x_train: np.ndarray,
    y_train: np.ndarray,
    spec: TrainingSpec,
    *,
    device: torch.device,
    on_epoch: EpochCallback | None = None,
    sync_every: int = 1,
    encoder: Encoder = BUILT_IN_ENCODER,
    planned_rows: int | None = None,
) -> TrainingResult:
    """Train ``spec`` in ``spec.world_size`` processes; the same result as ``training.train``
    (padded to ``planned_rows`` as it is).

    Args:
        sync_every: epochs between the points where rank 0 waits for ``on_epoch``'s verdict
            (``worker.tasks.report_interval``); a stop takes effect only there, so the steps run
            are exactly those reported.

    Raises:
        DistributedTrainingFailed: the subprocess exited non-zero or wrote no result.
    """
    backend = backend_for(device, spec.world_size)
    job_dir = Path(tempfile.mkdtemp(prefix="dpcrisis-ddp-"))
    try:
        distributed.write_job(
            job_dir, spec,
            padded_rows(torch.as_tensor(encoder.encode(x_train), dtype=torch.float32),
                        torch.as_tensor(y_train, dtype=torch.float32), planned_rows),
            backend=backend, sync_every=sync_every,
        )
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={spec.world_size}", "--module", "worker.distributed", str(job_dir),
        ]
        logger.info("training in %d processes (%s)", spec.world_size, backend)
        with (job_dir / "torchrun.log").open("wb") as log:
            # Its own session, so a stop reaches torchrun's ranks too.
            process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            try:
                _relay(process, job_dir, on_epoch)
            finally:
                _stop(process)
        return _result(process.returncode, job_dir, spec, encoder.n_inputs)
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def _relay(process: subprocess.Popen, job_dir: Path, on_epoch: EpochCallback | None) -> None:
    """Turn rank 0's epoch lines into ``on_epoch`` calls until the subprocess exits."""
    offset, go_on = 0, True
    while True:
        exited = process.poll() is not None
        lines, offset = distributed.tail_lines(job_dir / distributed.PROGRESS, offset)
        for line in lines:
            report = json.loads(line)
            history = [(float(s), float(q), int(n)) for s, q, n in report["history"]]
            if on_epoch is not None and go_on:
                go_on = on_epoch(int(report["epoch"]), history)
            if report["waits"]:
                distributed.append_line(job_dir / distributed.CONTROL,
                                        f"{report['epoch']} {int(go_on)}")
        if exited:
            return
        time.sleep(POLL_S)


def _stop(process: subprocess.Popen) -> None:
    """End torchrun and its ranks if still running (an error or a lost lease got here)."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
            process.wait(wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _result(
    returncode: int | None, job_dir: Path, spec: TrainingSpec, n_inputs: int
) -> TrainingResult:
    path = job_dir / distributed.RESULT
    if returncode != 0 or not path.exists():
        log = (job_dir / "torchrun.log").read_text(errors="replace")[-LOG_TAIL_CHARS:]
        raise DistributedTrainingFailed(f"torchrun exited with {returncode}:\n{log}")
    saved = torch.load(path, weights_only=True, map_location="cpu")
    network = build_network(spec.kind, spec.hidden_units, n_inputs)
    network.load_state_dict(saved["state_dict"])
    epochs = int(saved["epochs_completed"])
    return TrainingResult(
        network=network.eval(),
        epochs_completed=epochs,
        history=[(float(s), float(q), int(n)) for s, q, n in saved["history"]],
        stopped_early=epochs < spec.epochs,
    )
