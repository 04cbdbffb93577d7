"""One DP-SGD job across W processes: the per-rank entry point that ``torchrun`` runs.

``worker.launch`` starts ``python -m torch.distributed.run --standalone --nproc_per_node=W
--module worker.distributed JOB_DIR``. The mechanism is the single-process one, so the ledger's
(sigma, q, steps) plan and its epsilon hold unchanged:

1. Poisson sampling of the WHOLE table at the global rate q. The rows are split into W disjoint
   shards by a public permutation (Opacus' ``DistributedUniformWithReplacementSampler``) and each
   rank keeps each row of its shard with probability q (its own secret generator): every record
   is in a step's global batch with probability q, and in at most one rank's batch. Unlike
   Opacus' sampler, an empty local batch still takes its step: skipping it would pair different
   steps in the all-reduce (or hang it) and record fewer steps than were charged.
2. Per-sample clipping of the whole gradient (flat clipping), summed over the local batch.
3. Opacus' ``DistributedDPOptimizer``: only rank 0 adds N(0, (sigma C)^2); every rank divides by
   E / W, the sum is all-reduced and divided by W, giving (all clipped gradients + ONE noise
   draw) / E with E = int(n q), the expected global batch, exactly as one process.
4. The accountant records the global q. The known pitfall is a non-distributed Poisson loader on
   every rank: each rank then samples every record at rate q, a record can enter a step twice
   (rate about W q) while the accountant still records q.

Rank 0 reports each epoch's accountant history to the parent, waits for its go-ahead at report
epochs (so a stopped job has run exactly the steps it was charged for) and writes the result.
"""

import json
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from opacus.accountants import PRVAccountant
from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
from opacus.grad_sample import GradSampleModule
from opacus.optimizers import DistributedDPOptimizer
from opacus.utils.uniform_sampler import DistributedUniformWithReplacementSampler
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import TensorDataset

from app.privacy.accounting import poisson_plan
from app.registry.network import build_network
from worker.dpsgd import secret_generator
from worker.training import (
    TailAverage,
    TrainingSpec,
    check_plan,
    first_averaged_step,
    make_optimizer,
)

CONFIG, DATA, PROGRESS, CONTROL, RESULT = (
    "config.json", "data.pt", "progress.jsonl", "control", "result.pt",
)
DECISION_TIMEOUT_S = 900.0  # rank 0 gives up if the parent stops answering (it died)
POLL_S = 0.002

History = list[tuple[float, float, int]]


class ShardPoissonSampler(DistributedUniformWithReplacementSampler):
    """Opacus' shard split with Poisson rate q per row, yielding EVERY step, empty ones too."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        order = torch.randperm(
            self.total_size, generator=torch.Generator().manual_seed(self.shuffle_seed + self.epoch)
        )
        shard = order[self.rank : self.total_size : self.num_replicas]
        for _ in range(self.num_batches):
            keep = torch.rand(self.num_samples, generator=self.generator) < self.sample_rate
            yield shard[keep]


class DistributedDPSGD:
    """One rank's share of a job (call after ``init_process_group``).

    Args:
        network: the rank's replica; DPDDP broadcasts rank 0's initial weights to all.
        optimizer: steps ``network``'s parameters; sees only the reduced noisy gradient.
        x, y: the WHOLE training table (scaled features, labels 0/1) on ``device``; this rank
            only ever reads its shard.
        spec: the job; its sample rate and steps must be the ones the ledger charged.
    """

    def __init__(
        self,
        network: nn.Module,
        optimizer: torch.optim.Optimizer,
        x: torch.Tensor,
        y: torch.Tensor,
        spec: TrainingSpec,
        weight: torch.Tensor,
    ) -> None:
        """``weight``: 1 per row read, 0 per padding row (``worker.training.padded_rows``)."""
        self.x, self.y, self.weight = x, y, weight
        n_rows = len(x)
        self.sample_rate, self.steps_per_epoch = poisson_plan(n_rows, spec.batch_size)
        check_plan(spec, self.sample_rate, self.steps_per_epoch)
        self.expected_batch_size = max(1, int(n_rows * self.sample_rate))  # global, as Opacus
        self.world_size = dist.get_world_size()
        self.sampler = ShardPoissonSampler(
            total_size=n_rows, sample_rate=self.sample_rate, steps=self.steps_per_epoch,
            generator=secret_generator(torch.device("cpu")),
        )
        self.private = spec.noise_multiplier > 0
        self.accountant = PRVAccountant()
        module: nn.Module = DPDDP(network)
        if self.private:
            module = GradSampleModule(module)
            optimizer = dp_optimizer = DistributedDPOptimizer(
                optimizer,
                noise_multiplier=spec.noise_multiplier,
                max_grad_norm=spec.max_grad_norm,
                # per rank: after the all-reduce's division by W the sum is over E, as one process
                expected_batch_size=self.expected_batch_size / self.world_size,
                generator=secret_generator(x.device),
            )
            # The ledger's q, not make_private's 1 / len(loader) (which is 1 / (k - 1) for
            # some k = ceil(n / batch), as float 1 / (1 / k) can round below k).
            dp_optimizer.attach_step_hook(
                self.accountant.get_optimizer_hook_fn(sample_rate=self.sample_rate)
            )
        self.module, self.optimizer = module, optimizer

    def _loss(self, logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Private: the weighted mean (Opacus rescales it per sample); non-private: sum / E on
        every rank, and a summed all-reduce gives sum / E globally. Zero, still in the graph,
        for an empty batch (its noisy step is still taken)."""
        if rows.numel() == 0:
            return logits.sum() * 0.0
        losses = nn.functional.binary_cross_entropy_with_logits(
            logits, self.y[rows], reduction="none") * self.weight[rows]
        return losses.mean() if self.private else losses.sum() / self.expected_batch_size

    @property
    def history(self) -> History:
        return [(float(s), float(q), int(n)) for s, q, n in self.accountant.history]

    def run_epoch(self) -> None:
        for rows in self.sampler:
            self.step(rows)

    def step(self, rows: torch.Tensor) -> None:
        """One optimizer step on this rank's ``rows`` (possibly none) of the table."""
        rows = rows.to(self.x.device)
        self.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.module(self.x[rows]).squeeze(-1)
        self._loss(logits, rows).backward()
        if not self.private:
            for p in self.module.parameters():
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        self.optimizer.step()


def tail_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """Complete lines appended to ``path`` since ``offset`` (a half-written line waits)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    return data[:end].decode().splitlines(), offset + end


def append_line(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text + "\n")


class ParentLink:
    """Rank 0's side of the files it shares with the parent worker."""

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self._offset = 0

    def report(self, epoch: int, history: History, *, waits: bool) -> None:
        append_line(self.job_dir / PROGRESS,
                    json.dumps({"epoch": epoch, "history": history, "waits": waits}))

    def decision(self, epoch: int) -> bool:
        """Block until the parent says whether to go on after ``epoch``."""
        deadline = time.monotonic() + DECISION_TIMEOUT_S
        while time.monotonic() < deadline:
            lines, self._offset = tail_lines(self.job_dir / CONTROL, self._offset)
            for line in lines:
                seen, go_on = line.split()
                if int(seen) == epoch:
                    return go_on == "1"
            time.sleep(POLL_S)
        raise TimeoutError(f"no decision from the parent worker after epoch {epoch}")


def _device(backend: str) -> torch.device:
    if backend == "nccl":
        device = torch.device("cuda", dist.get_node_local_rank())
        torch.cuda.set_device(device)
        return device
    torch.set_num_threads(1)  # W ranks share the cores; small tensors gain nothing from more
    return torch.device("cpu")


def run_rank(job_dir: Path) -> None:
    """Train this rank's share; rank 0 reports, relays stop decisions and writes the result."""
    config = json.loads((job_dir / CONFIG).read_text())
    spec = TrainingSpec(**config["spec"])
    device = _device(config["backend"])
    # Opacus' hooks fire on module outputs because inputs need no gradient: expected, harmless.
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    rank = dist.get_rank()
    data = torch.load(job_dir / DATA, weights_only=True)
    torch.manual_seed(spec.seed)  # initial weights only (and rank 0's are broadcast anyway)
    network = build_network(spec.kind, spec.hidden_units, data["x"].shape[1]).to(device)
    optimizer = make_optimizer(network, spec, n_train=len(data["x"]))
    average = TailAverage(optimizer, first_step=first_averaged_step(spec))
    engine = DistributedDPSGD(network, optimizer, data["x"].to(device), data["y"].to(device), spec,
                              data["weight"].to(device))
    link = ParentLink(job_dir) if rank == 0 else None
    sync_every = int(config["sync_every"])
    epochs_completed = 0
    for epoch in range(1, spec.epochs + 1):
        engine.run_epoch()
        epochs_completed = epoch
        waits = epoch < spec.epochs and epoch % sync_every == 0
        if link is not None:
            link.report(epoch, engine.history, waits=waits)
        if waits:
            go_on = torch.tensor([int(link.decision(epoch)) if link else 0], device=device)
            dist.broadcast(go_on, src=0)
            if not go_on.item():
                break
    if rank == 0:
        average.apply_to(network)
        state = {k: v.cpu() for k, v in network.state_dict().items()}
        result = {"state_dict": state, "history": engine.history,
                  "epochs_completed": epochs_completed}
        torch.save(result, job_dir / f"{RESULT}.tmp")
        (job_dir / f"{RESULT}.tmp").replace(job_dir / RESULT)


def write_job(job_dir: Path, spec: TrainingSpec, rows: TensorDataset, *,
              backend: str, sync_every: int) -> None:
    """The inputs every rank reads: the spec, the backend and the scaled training table with
    its row weights (``worker.training.padded_rows``)."""
    config = {"spec": asdict(spec), "backend": backend, "sync_every": sync_every}
    (job_dir / CONFIG).write_text(json.dumps(config))
    x, y, weight = rows.tensors
    torch.save({"x": x, "y": y, "weight": weight}, job_dir / DATA)


@record  # torchrun's failure summary then carries the rank's traceback
def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    job_dir = Path(args[0])
    backend = json.loads((job_dir / CONFIG).read_text())["backend"]
    dist.init_process_group(backend)
    try:
        run_rank(job_dir)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

