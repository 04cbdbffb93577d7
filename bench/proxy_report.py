"""The tables ``bench/proxy_study.py`` prints, and the goals it checks per cell.

Goals, per table and epsilon, on the means over splits: the defaults' AUC at least
Opacus-as-a-user's and DP-EBM's minus 0.005 and at least diffprivlib's; their log-loss at most
min(Opacus-as-a-user's + 0.01, the non-DP base rate's), and on every split at most that
split's base rate's (``LL split``); and on tables of 900+ rows the
run-to-run log-loss spread (max - min over repeats of one job: same split, fresh noise) at
most 0.05.
"""

from dataclasses import dataclass, field

import numpy as np

from bench.peers import Scores

METHODS = ("ours", "opacus", "diffprivlib", "dp_ebm", "dp_ebm_family", "base", "base_dp",
           "non_private")
LABELS = {"ours": "defaults", "opacus": "Opacus-as-a-user", "diffprivlib": "diffprivlib",
          "dp_ebm": "DP-EBM", "dp_ebm_family": "DP-EBM family (ours, uncalibrated)",
          "non_private": "non-private", "base": "base rate",
          "base_dp": "DP base rate"}
AUC_SLACK, LOSS_SLACK, MAX_SPREAD, SPREAD_ROWS = 0.005, 0.01, 0.05, 900


@dataclass
class Cell:
    """One table at one epsilon, over splits: each method's scores, and what the plan was."""

    scores: dict[str, list[Scores]] = field(
        default_factory=lambda: {m: [] for m in METHODS})
    plans: set[str] = field(default_factory=set)  # optimizer, batch and epochs planned
    clips: list[float] = field(default_factory=list)  # the planned clip norms
    withheld: int = 0  # splits whose calibration was not released (below its size floor)
    coarse: int = 0  # splits whose calibration was the coarse release (worker.calibration)
    repeats: list[float] = field(default_factory=list)  # log-losses of one job, fresh noise
    refused: str | None = None

    def mean(self, method: str, metric: str) -> float:
        return float(np.mean([getattr(s, metric) for s in self.scores[method]]))

    def worst(self, method: str, metric: str) -> float:
        values = [getattr(s, metric) for s in self.scores[method]]
        return float(min(values) if metric == "auc" else max(values))

    def spread(self) -> float | None:
        return float(np.ptp(self.repeats)) if len(self.repeats) > 1 else None


def goals(cell: Cell, rows: int) -> dict[str, bool | None]:
    """Each goal of the module's list: held, missed, or None (not applicable)."""
    auc, opacus_auc = cell.mean("ours", "auc"), cell.mean("opacus", "auc")
    loss = cell.mean("ours", "log_loss")
    loss_cap = min(cell.mean("opacus", "log_loss") + LOSS_SLACK, cell.mean("base", "log_loss"))
    spread = cell.spread()
    splits = zip(cell.scores["ours"], cell.scores["base"], strict=True)
    return {
        "AUC": (auc >= max(opacus_auc, cell.mean("dp_ebm", "auc")) - AUC_SLACK
                and auc >= cell.mean("diffprivlib", "auc")),
        "LL": loss <= loss_cap,
        "LL split": all(ours.log_loss <= base.log_loss for ours, base in splits),
        "spread": None if rows < SPREAD_ROWS or spread is None else spread <= MAX_SPREAD,
    }


def _mw(cell: Cell, method: str, metric: str) -> str:
    return f"{cell.mean(method, metric):.3f} ({cell.worst(method, metric):.3f})"


def _goal_text(held: dict[str, bool | None]) -> str:
    missed = [name for name, ok in held.items() if ok is False]
    return "yes" if not missed else "no: " + ", ".join(missed)


def print_table(name: str, header: str, cells: dict[float, Cell], rows: int) -> None:
    """One table's cells: the plan and goals per epsilon, then each method's mean (worst over
    splits) AUC, log-loss and Brier."""
    print(f"\n### {name}: {header}\n")
    print("| ε | plan | spread | cal. withheld / coarse | goals |")
    print("|---|---|---|---|---|")
    for eps, cell in cells.items():
        if not cell.scores["ours"]:
            print(f"| {eps:g} | refused: {cell.refused} |")
            continue
        spread, clips = cell.spread(), f"C{min(cell.clips):g}-{max(cell.clips):g}"
        print(f"| {eps:g} | {'; '.join(sorted(cell.plans))} {clips} | "
              f"{'-' if spread is None else f'{spread:.3f}'} | "
              f"{cell.withheld}, {cell.coarse} of {len(cell.scores['ours'])} | "
              f"{_goal_text(goals(cell, rows))} |")
    print("\n| ε | method | AUC | log-loss | Brier |")
    print("|---|---|---|---|---|")
    for eps, cell in cells.items():
        for method in METHODS if cell.scores["ours"] else ():
            print(f"| {eps:g} | {LABELS[method]} | {_mw(cell, method, 'auc')} | "
                  f"{_mw(cell, method, 'log_loss')} | {_mw(cell, method, 'brier')} |")


def print_summary(title: str, results: dict[str, tuple[int, dict[float, Cell]]]) -> None:
    """Per epsilon, over tables: how many cells hold each goal, and the worst margins."""
    print(f"\n### {title}: goals held per epsilon\n")
    print("| ε | AUC goal | LL goal | LL split goal | spread goal | worst AUC - Opacus "
          "| worst LL - cap |")
    print("|---|---|---|---|---|---|---|")
    epsilons = sorted({eps for _, cells in results.values() for eps in cells})
    for eps in epsilons:
        cells = [(rows, c[eps]) for rows, c in results.values() if c[eps].scores["ours"]]
        if not cells:
            print(f"| {eps:g} | refused everywhere |")
            continue
        held = [goals(c, rows) for rows, c in cells]
        counts = []
        for key in ("AUC", "LL", "LL split", "spread"):
            applicable = [h[key] for h in held if h[key] is not None]
            counts.append(f"{sum(bool(v) for v in applicable)} of {len(applicable)}")
        auc_margin = min(c.mean("ours", "auc") - c.mean("opacus", "auc") for _, c in cells)
        loss_margin = max(c.mean("ours", "log_loss") - min(
            c.mean("opacus", "log_loss") + LOSS_SLACK, c.mean("base", "log_loss"))
            for _, c in cells)
        print(f"| {eps:g} | {' | '.join(counts)} | {auc_margin:+.4f} | {loss_margin:+.4f} |")
