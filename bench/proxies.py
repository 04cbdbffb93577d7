"""Public proxy tables of different shapes, each with a declared schema of *public* bounds.

Used by ``bench/proxy_study.py`` to measure the default recipe on data nobody tuned it on.
Raw rows hold one number per feature in declaration order (a categorical feature: the
category's index), exactly as ``app.datasets.schema.encoding`` expects.

Real public tables (a package ships them, no download):

* ``breast_cancer``: scikit-learn's Wisconsin diagnostic table (569 rows, 30 features; outcome:
  malignant, 37%). The bounds are *not* the documented summary min/max of these rows; they come
  from what each feature is (the dataset's description): a radius of at most ``RADIUS_CAP`` = 40
  image units, so a perimeter of at most 2 pi 40 (rounded to 260) and an area of at most
  pi 40^2 (rounded to 5,000); texture is the standard deviation of 8-bit gray levels, at most
  127.5, so [0, 128]; smoothness, compactness, concavity, concave points and symmetry are
  dimensionless shape ratios of order 0.1 to 1, capped generously at 2; fractal dimension is the
  coastline approximation minus 1, and a curve's dimension lies in [1, 2], so [0, 1]. The
  standard error of a feature (the "_se" columns: the spread of the mean over the nuclei of one
  image) is capped at half the feature's cap. Generous caps like these are what a data steward
  can declare without looking at the rows; they leave the data in a small part of [-1, 1].
* ``fair``: statsmodels' extramarital-affairs survey (Fair 1978; 6,366 rows, 8 features, two of
  them categorical; outcome: any time in affairs, 32%). The bounds are the survey codebook's
  (statsmodels' ``NOTE``): ratings 1-5 and 1-4, education codes 9-20, occupations 1-6 (as
  categories), age and years married as coded interval midpoints (17.5-42, 0.5-23), children
  0-5.5 ("5.5" codes five or more).

Built proxies (seeded generators; the outcome's intercept is solved for the stated prevalence):

* ``crisis``: the service's own generator (``app.datasets.synthetic``, about 2%).
* ``mixed``: 10 clinical-style features (integers with declared model caps, a skewed lab value,
  two binaries, a 5-category region), about 15%; the true log-odds is not linear in one feature
  (log of CRP), so logistic regression is slightly misspecified, as on real data.
* ``wide``: 30 features (18 correlated lab z-scores, 4 capped counts, 6 binaries, 2 categorical),
  about 1%, ten of them without effect.
* ``bends``: 8 features whose effects are not linear (a U-shaped lab value and BMI, a J-shaped
  age, a threshold on a symptom score, a saturating heart rate), two binaries, one without
  effect; about 10%: where a logistic model on the scaled values is misspecified.
* ``coded``: 24 coded features (20 diagnosis-code flags of 2-30% each, half of them with an
  effect, and 4 categorical ones of 4-8 categories whose effects are not monotone in the
  codes' order) and age; about 6%: an outcome carried by many coded inputs.
"""

import numpy as np

from app.datasets import synthetic
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from bench.proxy_declarations import Proxy, binary, categorical, declared_schema, numeric

RADIUS_CAP = 40.0


_SIZE_CAPS = {"radius": RADIUS_CAP, "texture": 128.0, "perimeter": 260.0, "area": 5000.0,
              "smoothness": 2.0, "compactness": 2.0, "concavity": 2.0,
              "concave_points": 2.0, "symmetry": 2.0, "fractal_dimension": 1.0}


def breast_cancer() -> Proxy:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    features, columns = [], []
    for j, raw_name in enumerate(data.feature_names):
        words = (raw_name.replace("concave points", "concave_points")
                 .replace("fractal dimension", "fractal_dimension").split())
        stat, base = ("mean", words[1]) if words[0] == "mean" else (
            ("worst", words[1]) if words[0] == "worst" else ("se", words[0]))
        cap = _SIZE_CAPS[base] * (0.5 if stat == "se" else 1.0)
        features.append(numeric(f"{base}_{stat}", 0.0, cap, round(cap / 4, 4)))
        columns.append(j)
    x = data.data[:, columns].astype(np.float64)
    y = (data.target == 0).astype(np.float64)  # sklearn codes malignant as 0
    schema = declared_schema(features, "malignant", "Malignant (biopsy)", (0.2, 0.5))
    return Proxy("breast_cancer", schema, x, y, True,
                 "sklearn Wisconsin diagnostic; bounds from feature definitions")


_OCCUPATIONS = ["student", "unskilled", "white_collar", "skilled", "managerial", "professional"]


def fair() -> Proxy:
    import statsmodels.api as sm

    frame = sm.datasets.fair.load_pandas().data
    features = [
        numeric("rate_marriage", 1, 5, 4, "integer"),
        numeric("age", 17.5, 42.0, 27.0),
        numeric("yrs_married", 0.5, 23.0, 6.0),
        numeric("children", 0.0, 5.5, 1.0),
        numeric("religious", 1, 4, 2, "integer"),
        numeric("educ", 9, 20, 14, "integer"),
        categorical("occupation", _OCCUPATIONS, "white_collar"),
        categorical("occupation_husb", _OCCUPATIONS, "skilled"),
    ]
    x = np.column_stack([
        frame[c].to_numpy(float) for c in
        ("rate_marriage", "age", "yrs_married", "children", "religious", "educ")
    ] + [frame["occupation"].to_numpy(float) - 1, frame["occupation_husb"].to_numpy(float) - 1])
    y = (frame["affairs"].to_numpy() > 0).astype(np.float64)
    declared = declared_schema(features, "affair", "Any time in affairs", (0.2, 0.5))
    return Proxy("fair", declared, x, y, True,
                 "statsmodels Fair (1978) survey; bounds from its codebook")


def crisis(n_rows: int, seed: int = 910_101) -> Proxy:
    table = synthetic.generate(n_rows, seed)  # a seed no test or default was tuned on
    return Proxy("crisis", BUILT_IN_SCHEMA, table.x, table.y, False,
                 "the service's generator")


def _intercept_for(logit: np.ndarray, prevalence: float) -> float:
    """The intercept b with mean(sigmoid(logit + b)) = prevalence (bisection, generator-side)."""
    low, high = -30.0, 30.0
    for _ in range(80):
        mid = (low + high) / 2
        if np.mean(1 / (1 + np.exp(-(logit + mid)))) < prevalence:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _outcome(rng: np.random.Generator, logit: np.ndarray, prevalence: float) -> np.ndarray:
    p = 1 / (1 + np.exp(-(logit + _intercept_for(logit, prevalence))))
    return rng.binomial(1, p).astype(np.float64)


_REGIONS = ["north", "south", "east", "west", "central"]


def mixed(n_rows: int, seed: int = 20_251) -> Proxy:
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 91, n_rows)
    bmi = np.clip(rng.normal(27, 5, n_rows), 12, 75)
    sbp = np.clip(np.rint(rng.normal(128, 18, n_rows)), 70, 250)
    hr = np.clip(np.rint(rng.normal(75, 12, n_rows)), 30, 220)
    crp = np.clip(rng.lognormal(1.0, 1.2, n_rows), 0, 300)
    visits = np.clip(rng.poisson(3, n_rows), 0, 365)
    smoker, diabetes = rng.binomial(1, 0.25, n_rows), rng.binomial(1, 0.12, n_rows)
    region = rng.choice(5, n_rows, p=[0.3, 0.25, 0.2, 0.15, 0.1])
    phq9 = rng.integers(0, 28, n_rows)
    logit = (0.03 * (age - 50) + 0.08 * (bmi - 27) + 0.015 * (sbp - 128) + 0.02 * (hr - 75)
             + 0.5 * np.log1p(crp) + 0.12 * np.minimum(visits, 24) + 0.6 * smoker
             + 0.8 * diabetes + np.array([0, 0.3, -0.2, 0.1, 0.5])[region] + 0.05 * phq9)
    features = [
        numeric("age", 18, 110, 45, "integer"),
        numeric("bmi", 10.0, 80.0, 25.0),
        numeric("systolic_bp", 60, 260, 120, "integer"),
        numeric("heart_rate", 20, 250, 70, "integer"),
        numeric("crp", 0.0, 500.0, 3.0, model_upper=100.0),
        numeric("visits", 0, 365, 2, "integer", model_upper=24),
        binary("smoker"), binary("diabetes"),
        categorical("region", _REGIONS, "north"),
        numeric("phq9", 0, 27, 5, "integer"),
    ]
    x = np.column_stack([age, bmi, sbp, hr, crp, visits, smoker, diabetes, region, phq9])
    declared = declared_schema(features, "event", "Event", (0.1, 0.3))
    return Proxy("mixed", declared, x.astype(np.float64),
                 _outcome(rng, logit, 0.15), False, "built: 10 features, one categorical")


def wide(n_rows: int, seed: int = 20_252) -> Proxy:
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, 1, (n_rows, 3))
    mixing = rng.normal(0, 0.5, (3, 18))
    labs = np.clip((rng.normal(0, 1, (n_rows, 18)) + shared @ mixing)
                   / np.sqrt(1 + (mixing**2).sum(0)), -6, 6)
    counts = np.clip(rng.poisson([1.0, 2.0, 3.0, 0.5], (n_rows, 4)), 0, 50)
    flags = rng.binomial(1, [0.1, 0.2, 0.3, 0.4, 0.15, 0.05], (n_rows, 6))
    cat_a, cat_b = rng.choice(3, n_rows), rng.choice(6, n_rows, p=[.3, .2, .2, .1, .1, .1])
    beta_labs = np.r_[[0.5, -0.4, 0.35, 0.3, -0.3, 0.25, 0.2, -0.2], np.zeros(10)]
    logit = (labs @ beta_labs + counts @ np.array([0.15, 0.1, 0.0, 0.3])
             + flags @ np.array([0.7, 0.0, 0.4, -0.3, 0.5, 0.9])
             + np.array([0, 0.4, -0.3])[cat_a] + np.array([0, 0.2, 0.5, -0.4, 0.1, 0.8])[cat_b])
    features = (
        [numeric(f"lab_{i:02d}", -6.0, 6.0, 0.0) for i in range(18)]
        + [numeric(f"count_{i}", 0, 50, 1, "integer", model_upper=20) for i in range(4)]
        + [binary(f"flag_{i}") for i in range(6)]
        + [categorical("site", ["a", "b", "c"], "a"),
           categorical("plan", ["p0", "p1", "p2", "p3", "p4", "p5"], "p0")]
    )
    x = np.column_stack([labs, counts, flags, cat_a, cat_b]).astype(np.float64)
    schema = declared_schema(features, "event", "Event", (0.025, 0.1))
    return Proxy("wide", schema, x, _outcome(rng, logit, 0.01), False,
                 "built: 30 features, two categorical")


_SCALE = list(range(1, 8))


def strong(n_rows: int, seed: int = 20_253) -> Proxy:
    """A common outcome that a few inputs nearly decide (non-private AUC about 0.95): where the
    defaults' models are confident, so their probabilities' scale matters most."""
    rng = np.random.default_rng(seed)
    leaning = np.clip(np.rint(rng.normal(4, 1.8, n_rows)), 1, 7)
    views = np.clip(np.rint(leaning[:, None] + rng.normal(0, 1.5, (n_rows, 3))), 1, 7)
    age = rng.integers(18, 91, n_rows)
    education = rng.integers(1, 8, n_rows)
    income = rng.integers(1, 25, n_rows)
    union, urban = rng.binomial(1, 0.15, n_rows), rng.binomial(1, 0.6, n_rows)
    logit = (1.3 * (leaning - 4) + (views - 4) @ np.array([0.6, 0.4, 0.2])
             + 0.01 * (age - 50) - 0.1 * (education - 4) - 0.03 * (income - 12)
             + 0.6 * union + 0.3 * urban)
    features = (
        [numeric("leaning", 1, 7, 4, "integer")]
        + [numeric(f"view_{i}", 1, 7, 4, "integer") for i in range(3)]
        + [numeric("age", 18, 110, 45, "integer"), numeric("education", 1, 7, 4, "integer"),
           numeric("income", 1, 24, 12, "integer"), binary("union"), binary("urban")]
    )
    x = np.column_stack([leaning, views, age, education, income, union, urban])
    return Proxy("strong", declared_schema(features, "event", "Event", (0.2, 0.6)),
                 x.astype(np.float64), _outcome(rng, logit, 0.4), False,
                 "built: 9 features, a few nearly decide a 40% outcome")


def bends(n_rows: int, seed: int = 20_254) -> Proxy:
    """Effects that bend (the module's list): an additive model of the features fits them, a
    model linear in each scaled value cannot."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 91, n_rows)
    sodium = np.clip(rng.normal(139, 5, n_rows), 110, 165)
    bmi = np.clip(rng.normal(27, 6, n_rows), 12, 70)
    symptoms = rng.integers(0, 28, n_rows)
    hr = np.clip(np.rint(rng.normal(80, 15, n_rows)), 30, 220)
    creatinine = np.clip(rng.lognormal(0.0, 0.4, n_rows), 0.2, 15)
    smoker, prior = rng.binomial(1, 0.25, n_rows), rng.binomial(1, 0.1, n_rows)
    logit = (1.2 * ((age - 45) / 25) ** 2 + 0.6 * np.minimum(((sodium - 140) / 5) ** 2, 6)
             + 0.8 * np.minimum(((bmi - 25) / 8) ** 2, 4) + 1.3 * (symptoms >= 15)
             + 0.9 * np.tanh((hr - 90) / 12) + 0.5 * smoker + 0.8 * prior)
    features = [
        numeric("age", 18, 110, 45, "integer"),
        numeric("sodium", 100.0, 180.0, 140.0),
        numeric("bmi", 10.0, 80.0, 25.0),
        numeric("symptom_score", 0, 27, 5, "integer"),
        numeric("heart_rate", 20, 250, 70, "integer"),
        numeric("creatinine", 0.0, 20.0, 1.0),
        binary("smoker"), binary("prior_event"),
    ]
    x = np.column_stack([age, sodium, bmi, symptoms, hr, creatinine, smoker, prior])
    return Proxy("bends", declared_schema(features, "event", "Event", (0.05, 0.2)),
                 x.astype(np.float64), _outcome(rng, logit, 0.10), False,
                 "built: 8 features, effects that bend")


_CODED_LEVELS = {"site": 8, "payer": 4, "referral": 5, "unit": 6}


def coded(n_rows: int, seed: int = 20_255) -> Proxy:
    """Many coded inputs (the module's list): flags and categories carry the outcome."""
    rng = np.random.default_rng(seed)
    rates = np.linspace(0.02, 0.30, 20)
    flags = rng.binomial(1, rates, (n_rows, 20))
    flag_effects = np.r_[np.linspace(1.2, 0.3, 10), np.zeros(10)][rng.permutation(20)]
    effects = np.random.default_rng(seed + 1).normal(0, 0.6, sum(_CODED_LEVELS.values()))
    categories, logit, start = [], flags @ flag_effects, 0
    for levels in _CODED_LEVELS.values():
        codes = rng.choice(levels, n_rows, p=np.linspace(2.0, 1.0, levels) / np.linspace(
            2.0, 1.0, levels).sum())
        logit = logit + effects[start:start + levels][codes]
        categories.append(codes)
        start += levels
    age = rng.integers(18, 91, n_rows)
    logit = logit + 0.015 * (age - 50)
    features = (
        [binary(f"code_{i:02d}") for i in range(20)]
        + [categorical(name, [f"{name}_{k}" for k in range(levels)], f"{name}_0")
           for name, levels in _CODED_LEVELS.items()]
        + [numeric("age", 18, 110, 45, "integer")]
    )
    x = np.column_stack([flags, *categories, age]).astype(np.float64)
    return Proxy("coded", declared_schema(features, "event", "Event", (0.03, 0.12)),
                 x, _outcome(rng, logit, 0.06), False, "built: 25 features, 24 of them coded")


BUILT_ROWS = {"crisis": 20_000, "mixed": 50_000, "wide": 200_000, "strong": 20_000,
              "bends": 20_000, "coded": 20_000}
REAL = ("breast_cancer", "fair", "anes96", "randhie", "randhie_rare")


def make(spec: str, generator_seed: int | None = None) -> Proxy:
    """One table by its spec: a real one by name, or a built one as ``name`` or ``name@rows``
    (its full size, or that many rows) drawn with ``generator_seed`` (None: the generator's
    own fixed seed); the proxy is named by its spec."""
    from bench import public_tables

    reals = {"breast_cancer": breast_cancer, "fair": fair, "anes96": public_tables.anes96,
             "randhie": public_tables.randhie,
             "randhie_rare": lambda: public_tables.randhie(visits=10)}
    if spec in reals:
        return reals[spec]()
    name, _, rows = spec.partition("@")
    makers = {"crisis": crisis, "mixed": mixed, "wide": wide, "strong": strong, "bends": bends,
              "coded": coded}
    n_rows = int(rows) if rows else BUILT_ROWS[name]
    extra = {} if generator_seed is None else {"seed": 1_000_003 * (generator_seed + 1)}
    proxy = makers[name](n_rows, **extra)
    return Proxy(spec, proxy.schema, proxy.x, proxy.y, proxy.real,
                 proxy.note + (", a fresh generator seed per split" if extra else ""))


def build(names: list[str], *, scale: float = 1.0) -> list[Proxy]:
    """The named proxies; ``scale`` shrinks the built ones (the real tables keep their size)."""
    makers = {
        "breast_cancer": breast_cancer,
        "fair": fair,
        "crisis": lambda: crisis(int(20_000 * scale)),
        "mixed": lambda: mixed(int(50_000 * scale)),
        "wide": lambda: wide(int(200_000 * scale)),
    }
    return [makers[name]() for name in names]
