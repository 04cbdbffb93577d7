"""Run under torchrun by ``test_distributed``: what each rank of the mechanism does per step.

Not a test module itself. Two runs of ``worker.distributed.DistributedDPSGD`` in one process
group, every rank's record gathered and saved by rank 0 to the path in ``argv[1]``:

* ``noise``: a loss of exactly zero (every row's weight 0), so the clipped sum is zero and
  the reduced gradient each step is the noise alone (its std tells whether noise was added
  once or once per rank).
* ``sparse``: q = 1/200 over 200 rows, so most local batches are empty (ranks must stay paired).
"""

import sys
from dataclasses import replace

import torch
import torch.distributed as dist

from app.registry.network import build_network
from worker.distributed import DistributedDPSGD
from worker.training import TrainingSpec

NOISE = TrainingSpec(
    kind="mlp", hidden_units=16, epochs=10, batch_size=100, learning_rate=1e-3, momentum=0.0,
    max_grad_norm=0.7, noise_multiplier=2.0, sample_rate=0.1, steps=100, delta=1e-5, seed=5,
    world_size=2,
)
SPARSE = replace(NOISE, kind="logistic", epochs=1, batch_size=1, sample_rate=1 / 200, steps=200)
N_ROWS = {"noise": 1000, "sparse": 200}


def _probe(spec: TrainingSpec, n_rows: int, zero_loss: bool) -> dict[str, object]:
    generator = torch.Generator().manual_seed(17)  # the same public toy table on every rank
    x = torch.randn(n_rows, 6, generator=generator)
    y = (torch.rand(n_rows, generator=generator) < 0.3).float()
    torch.manual_seed(spec.seed + dist.get_rank())  # different init: DPDDP must broadcast
    network = build_network(spec.kind, spec.hidden_units)
    optimizer = torch.optim.SGD(network.parameters(), lr=spec.learning_rate)
    # Zero loss: every row weighs 0 (as a padding row does), so each clipped sum is zero.
    weight = torch.zeros(n_rows) if zero_loss else torch.ones(n_rows)
    engine = DistributedDPSGD(network, optimizer, x, y, spec, weight)
    rows, grads = [], []
    for _ in range(spec.epochs):
        for batch in engine.sampler:
            engine.step(batch)
            rows.append(batch.tolist())
            grads.append(torch.cat([p.grad.reshape(-1) for p in network.parameters()]).clone())
    return {
        "rows": rows,
        "grads": torch.stack(grads),
        "params": torch.cat([p.detach().reshape(-1) for p in network.parameters()]),
        "history": engine.history,
        "expected_batch_size": engine.expected_batch_size,
    }


def main() -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    mine = {"noise": _probe(NOISE, N_ROWS["noise"], True),
            "sparse": _probe(SPARSE, N_ROWS["sparse"], False)}
    everyone: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if dist.get_rank() == 0:
        torch.save(everyone, sys.argv[1])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
