"""The release inventory of a training job's hyper-parameter search.

The search is one release, Papernot and Steinke's repeat-and-select (``app.privacy.selection``):
of a random number of DP-SGD runs, only the best is released, with its candidate and its
score. Its plan (the public grid, the distribution of the number of runs) is the request's; its
figures are the ledger's (functions of the public mechanism parameters). The chosen candidate
is part of the selected output, as its model is (``DP_TRAINING``: the ledger charges the whole
search); its score is post-processing of that run's calibration release (``DP_CALIBRATION``).
The number of runs used and the other runs are not released anywhere; the number executed
(M, whatever that number) and the tail P(K > M) are the plan's, public.
"""

from app.privacy.releases import Entry, Release, fields

PUBLIC_INPUT = Release.PUBLIC_INPUT
LEDGER = Release.LEDGER
DP_TRAINING = Release.DP_TRAINING
DP_CALIBRATION = Release.DP_CALIBRATION

SEARCH_ENTRIES: list[Entry] = [
    *fields("SearchOut", {
        PUBLIC_INPUT: "runs mean_runs shape note",
        LEDGER: "run_epsilon total_epsilon executed_runs tail_probability tail_delta "
                "accountant",
    }, note="the search as planned: the request's grid and distribution, and the ledger's "
       "figures of one run and of the whole repeat-and-select release, with the runs executed "
       "whatever K and their tail (functions of the public plan)"),
    *fields("SearchCandidateRecord", {
        PUBLIC_INPUT: "model optimizer learning_rate momentum max_grad_norm tail_average "
                      "hidden_units",
    }, note="a candidate of the public grid, as the request gave it (defaults resolved)"),
    *fields("SearchRecord", {
        DP_TRAINING: "chosen_candidate",
        DP_CALIBRATION: "chosen_score",
        PUBLIC_INPUT: "score note",
        LEDGER: "executed_runs tail_probability tail_delta",
    }, note="the best run of the search, the one output repeat-and-select releases: which "
       "candidate (selected with its model, charged as the whole search) and its score, the "
       "DP log-loss computed from that run's calibration release alone"),
    *fields("SearchCharge", {LEDGER: "runs mean_runs shape run_steps"},
            note="a search entry's event, RepeatAndSelectDpEvent, as stored"),
]
