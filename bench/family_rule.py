"""Is there a rule on public quantities that picks the dp_ebm family where it wins?

Reads the per-split figures ``bench/family_choice.py --json`` kept (no rerun), and per cell
(table, epsilon) gives a verdict from the paired differences over splits (family - defaults):
AUC and log-loss each "dp_ebm", "defaults" or "tie", a side winning where its mean is ahead by
more than ``MARGIN`` and by more than ``SES`` standard errors over splits. A cell is the
family's where its AUC wins and its log-loss does not lose, the defaults' where either of
theirs wins (``--auc-only``: by the AUC's verdict alone, the ranking a data scientist may
care about before calibration). A borderline cell is then drawn again with
``bench/peer_draws.py --peer dp_ebm_family``.

The rules searched read public quantities only (``family_choice.Public``): pick dp_ebm where
the training part has at least N rows, epsilon is at least E, and the share of numeric
features among the declared ones is at least S (or at most S), every threshold at a value
the cells hold. A rule *holds* on a set when it picks at least one of the family's cells and
none of the defaults'. Printed: each cell's verdict, the rules that hold on the set read
(there, the rules are chosen), and, given ``--confirm``, how each such rule fares on those
cells (there, they are judged).

    .venv/bin/python bench/family_rule.py /tmp/choose.json --confirm /tmp/confirm.json
"""

import argparse
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MARGIN, SES = 0.005, 2.0
FAMILY, DEFAULTS, TIE = "dp_ebm", "defaults", "tie"


@dataclass(frozen=True)
class Verdict:
    table: str
    public: dict[str, Any]  # the first split's (epsilon, features; rows vary by a few)
    auc: tuple[float, float]  # mean and SE of family - defaults
    log_loss: tuple[float, float]
    side: str


def _side(mean: float, se: float, lower_is_better: bool) -> str:
    ahead = -mean if lower_is_better else mean  # > 0: the family ahead
    if ahead > MARGIN and ahead > SES * se:
        return FAMILY
    if -ahead > MARGIN and -ahead > SES * se:
        return DEFAULTS
    return TIE


def verdicts(rows: list[dict[str, Any]], auc_only: bool = False) -> list[Verdict]:
    cells: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for row in rows:
        if row["defaults"] is not None:
            cells.setdefault((row["table"], row["public"]["epsilon"]), []).append(row)
    out = []
    for (table, _), cell in cells.items():
        figures = []
        for metric in ("auc", "log_loss"):
            d = np.array([r["family"][metric] - r["defaults"][metric] for r in cell])
            figures.append((float(d.mean()),
                            float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else np.inf))
        auc_side = _side(*figures[0], lower_is_better=False)
        loss_side = _side(*figures[1], lower_is_better=True)
        side = (auc_side if auc_only else DEFAULTS if DEFAULTS in (auc_side, loss_side)
                else FAMILY if auc_side == FAMILY else TIE)
        out.append(Verdict(table, cell[0]["public"], figures[0], figures[1], side))
    return out


def numeric_share(public: dict[str, Any]) -> float:
    return public["numeric"] / (public["numeric"] + public["binary"] + public["categorical"])


def picks(rule: tuple[int, float, float, bool], public: dict[str, Any]) -> bool:
    rows, epsilon, share, at_least = rule
    s = numeric_share(public)
    return (public["n_train"] >= rows and public["epsilon"] >= epsilon
            and (s >= share if at_least else s <= share))


def rules_that_hold(cells: list[Verdict]) -> list[tuple[tuple[int, float, float, bool], int]]:
    """Every threshold rule (module docstring) that holds on ``cells``, with how many of the
    family's cells it picks, most first."""
    grid = itertools.product(sorted({c.public["n_train"] for c in cells}),
                             sorted({c.public["epsilon"] for c in cells}),
                             sorted({numeric_share(c.public) for c in cells}), (True, False))
    held = []
    for rule in grid:
        chosen = [c.side for c in cells if picks(rule, c.public)]
        if DEFAULTS not in chosen and chosen.count(FAMILY) > 0:
            held.append((rule, chosen.count(FAMILY)))
    return sorted(held, key=lambda item: -item[1])


def print_verdicts(title: str, cells: list[Verdict]) -> None:
    print(f"\n### {title}: family - defaults, mean (SE over splits)\n")
    print("| table | ε | training rows | numeric share | Δ AUC | Δ log-loss | cell |")
    print("|---|---|---|---|---|---|---|")
    for c in cells:
        print(f"| {c.table} | {c.public['epsilon']:g} | {c.public['n_train']} | "
              f"{numeric_share(c.public):.2f} | {c.auc[0]:+.3f} ({c.auc[1]:.3f}) | "
              f"{c.log_loss[0]:+.3f} ({c.log_loss[1]:.3f}) | {c.side} |")
    sides = [c.side for c in cells]
    print(f"\n{sides.count(FAMILY)} cells the family's, {sides.count(DEFAULTS)} the defaults', "
          f"{sides.count(TIE)} ties")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("choose", help="bench/family_choice.py --json of the choose set")
    parser.add_argument("--confirm", help="the same of the confirm set")
    parser.add_argument("--auc-only", action="store_true", help="a cell's side by its AUC")
    args = parser.parse_args(argv)
    chosen_on = verdicts(json.loads(Path(args.choose).read_text()), args.auc_only)
    print_verdicts("choose set", chosen_on)
    held = rules_that_hold(chosen_on)
    print(f"\nrules that hold on the choose set: {len(held)}")
    for (rows, epsilon, share, at_least), wins in held[:10]:
        print(f"- n_train >= {rows}, epsilon >= {epsilon:g}, numeric share "
              f"{'>=' if at_least else '<='} {share:.2f}: picks {wins} of the family's cells")
    if args.confirm:
        confirm = verdicts(json.loads(Path(args.confirm).read_text()), args.auc_only)
        print_verdicts("confirm set", confirm)
        for rule, _ in held[:10]:
            chosen = [c.side for c in confirm if picks(rule, c.public)]
            print(f"- rule {rule}: on the confirm set picks {chosen.count(FAMILY)} of the "
                  f"family's cells, {chosen.count(DEFAULTS)} of the defaults', "
                  f"{chosen.count(TIE)} ties")


if __name__ == "__main__":
    main()
