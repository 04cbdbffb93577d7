"""Federations: several clinics train one model on Flower, each clinic's service guarding its
own patients. A federation is declared on the coordinating service (its sites, its
schema, its recipe) and on each clinic's (which joins it with one of its own datasets); a
clinic's part is a job of kind ``federated`` on its own queue and ledger."""
