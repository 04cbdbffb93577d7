"""The terms every privacy report states: who is protected against what, and how.

One place for the sentences, so the job report, the dataset report, their pages and the docs
(docs/privacy.md) cannot drift apart.
"""

from app.privacy.filter import CITATION

NEIGHBOURING_RELATION = (
    "Neighbouring datasets differ by adding or removing one patient's record. The number of "
    "rows, and the number of rows in each part (training, calibration, evaluation), are "
    "treated as public and released exactly, without noise: they set the sampling rate. "
    "Removing one patient changes exactly one of the part counts by one, so these counts "
    "reveal which part a removed patient was in, never any value of their record."
)
PARTS = (
    "Each record's part (training 70%, calibration 15%, evaluation 15%) is a keyed "
    "pseudo-random function (a length-prepended CBC-MAC with AES-256; keyed BLAKE2b for "
    "datasets registered before that scheme) of its stable id under a per-dataset secret kept "
    "on the server, so adding or removing one patient moves no other patient between parts; "
    "the calibration and the evaluation are DP releases on their own parts, no costlier than "
    "the training at any Rényi order, so they compose in parallel with it."
)
FILTER = (
    "Admission is a Rényi privacy filter at one order fixed from the budget at registration, "
    "valid when each job is chosen after seeing earlier results and when jobs run "
    f"concurrently ({CITATION}). A first release may instead use the whole budget by its own "
    "tight epsilon; the filter then admits nothing more unless it also fits at that order. "
    "The guarantee is relative to the final budget: an administrator who raises the budget "
    "after seeing results turns the filter into an odometer, and the dataset's guarantee is "
    "then the budget in force at the end (every change is a chained, audited ledger record)."
)
NOISE_SOURCE = (
    "Gaussian noise and Poisson sampling use PyTorch's and NumPy's generators seeded with fresh "
    "bits from the OS's CSPRNG for each job, not a cryptographically secure sampler: Opacus' "
    "secure mode needs torchcsprng, which the package index here does not offer. "
    "Floating-point attacks on textbook Gaussian samplers (Mironov 2012) are therefore not "
    "ruled out for training noise; this is a known gap."
)


def terms(filter_order: float | None) -> dict[str, str | float | None]:
    """The report block: relation, parts, filter (with its order), and the noise source."""
    return {
        "neighbouring_relation": NEIGHBOURING_RELATION,
        "parts": PARTS,
        "filter": FILTER if filter_order is not None else
        "No filter: a public dataset without a budget releases exact figures.",
        "filter_order": filter_order,
        "noise_source": NOISE_SOURCE,
    }


PATIENT_SPEND_WITHHELD = (
    "withheld: the per-patient spend depends on which other tables hold this dataset's "
    "patients, shown to data stewards and admins only; a release never fails for it, it "
    "leaves out the patients who cannot afford it")


def per_patient(space_kind: str | None, epsilon: float | None, delta: float | None) -> str:
    """The per-patient guarantee in words (the dataset report, every model statement): for the
    organisation's patient space (``space_kind`` "organisation"), a generator seed's (every
    generator dataset of the seed holds its patients: "generator"), or a dataset whose
    patients are in no other table; '' without a space (a public dataset)."""
    if space_kind is None or epsilon is None or delta is None:
        return ""
    budget, how = f"(epsilon {epsilon:g}, delta {delta:g})", ("a per-patient Rényi filter, "
                                                            "Feldman and Zrnic 2021")
    if space_kind == "generator":
        return (f"Each generated patient (row i of every generator dataset of this seed, "
                f"whatever its shift) is protected at {budget} per patient: every release on "
                "any dataset of the seed counts against that one budget, and a release leaves "
                f"out the patients whose own history cannot afford it ({how}).")
    if space_kind != "organisation":
        return (f"Each patient's record is protected at {budget} per patient across every "
                f"release on this dataset, the only table that holds its patients ({how}).")
    return (f"Each patient's records across the organisation's tables are protected at {budget} "
            "per patient: every release on any table that holds a patient counts against that "
            "one budget, and a release leaves out the patients whose own history cannot afford "
            f"it ({how}).")
