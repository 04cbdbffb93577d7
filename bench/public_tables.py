"""Two more real public tables for ``bench/proxy_study.py``'s confirmation set.

Both ship inside statsmodels (no download). Their bounds are their codebooks' (statsmodels'
``NOTE``) or what the quantity is, never the rows' min/max; their outcomes' bands are policy.

* ``anes96``: the 1996 American National Election Study extract (944 rows, 9 features;
  outcome: voted for Dole, 42%). Scales 1-7 (self, Clinton and Dole on the left-right scale,
  education), party identification 0-6, TV news days per week 0-7, income codes 1-24, age
  18-100, and the log of the respondent's town population in thousands (log 0.1 to
  log 10,000: a town of 100 people to a city of ten million).
* ``randhie``: the RAND Health Insurance Experiment (20,190 person-years, 9 features; outcome:
  any outpatient visit in the year, 69%; ``randhie_rare``: at least 10, 6%, a rare-outcome
  table). log(coinsurance + 1) for a rate of 0-100%, so [0, log 101]; the individual-deductible
  plan and physical-limitation flags; the log of the participation incentive and of the maximum
  deductible expenditure in dollars, both capped at log of $10,000; the count of chronic
  diseases capped at 100; three self-rated health flags (good, fair, poor; excellent is the
  reference).
"""

import math
from typing import Any

import numpy as np

from bench.proxy_declarations import Proxy, binary, declared_schema, numeric


def anes96() -> Proxy:
    import statsmodels.api as sm

    frame = sm.datasets.anes96.load_pandas().data
    columns: list[tuple[str, dict[str, Any]]] = [
        ("logpopul", numeric("log_population", math.log(0.1), math.log(10_000.0), 2.0)),
        ("TVnews", numeric("tv_news_days", 0, 7, 3, "integer")),
        ("selfLR", numeric("self_left_right", 1, 7, 4, "integer")),
        ("ClinLR", numeric("clinton_left_right", 1, 7, 3, "integer")),
        ("DoleLR", numeric("dole_left_right", 1, 7, 5, "integer")),
        ("PID", numeric("party_id", 0, 6, 3, "integer")),
        ("age", numeric("age", 18, 100, 45, "integer")),
        ("educ", numeric("education", 1, 7, 4, "integer")),
        ("income", numeric("income_code", 1, 24, 12, "integer")),
    ]
    x = np.column_stack([frame[c].to_numpy(float) for c, _ in columns])
    x[:, 0] = np.clip(x[:, 0], math.log(0.1), math.log(10_000.0))
    y = frame["vote"].to_numpy(float)
    schema = declared_schema([f for _, f in columns], "dole_vote", "Voted for Dole", (0.3, 0.6))
    return Proxy("anes96", schema, x, y, True, "statsmodels ANES 1996; bounds from its codebook")


def randhie(visits: int = 1) -> Proxy:
    """The RAND table with the outcome "at least ``visits`` outpatient visits a year"."""
    import statsmodels.api as sm

    frame = sm.datasets.randhie.load_pandas().data
    cap = math.log(10_000.0)
    columns: list[tuple[str, dict[str, Any]]] = [
        ("lncoins", numeric("log_coinsurance", 0.0, math.log(101.0), 0.0)),
        ("idp", binary("individual_deductible")),
        ("lpi", numeric("log_incentive", 0.0, cap, 4.0)),
        ("fmde", numeric("log_max_deductible", 0.0, cap, 4.0)),
        ("physlm", binary("physical_limitation")),
        ("disea", numeric("chronic_diseases", 0.0, 100.0, 10.0)),
        ("hlthg", binary("health_good")),
        ("hlthf", binary("health_fair")),
        ("hlthp", binary("health_poor")),
    ]
    x = np.column_stack([frame[c].to_numpy(float) for c, _ in columns])
    y = (frame["mdvis"].to_numpy() >= visits).astype(np.float64)
    label, bands = (("Any outpatient visit", (0.5, 0.8)) if visits == 1 else
                    (f"At least {visits} outpatient visits", (0.05, 0.2)))
    schema = declared_schema([f for _, f in columns], "visits", label, bands)
    return Proxy("randhie" if visits == 1 else "randhie_rare", schema, x, y, True,
                 "statsmodels RAND health insurance experiment; bounds from its codebook")
