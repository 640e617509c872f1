"""Ask for the GNN alone, trained from scratch, where a test is about the GNN or a single run.

`siggate train --data FILE.csv` (and the scikit-learn estimators, and ``load_config("csv")``)
default to the csv recipe: a combination of members with the GNN fine-tuned from the shipped
weights (``options.RECIPE_MEMBERS["csv"]``, ``configs/csv.yaml``'s ``train.init``). Tests that
train tiny architectures or read a single run's folder name the GNN-alone, from-scratch run
explicitly with these, defined once here.
"""

from __future__ import annotations

#: CLI flags: members averaged with equal weights (the csv recipe fits them on validation).
EQUAL_WEIGHTS = ["--weights", "equal"]
#: CLI flags: the GNN from random weights (the csv recipe fine-tunes the shipped ones).
SCRATCH = ["--init", "none"]
#: CLI flags: the GNN alone (one run's folder: best.pt, metrics.json), started as ``train.init`` says
#: (GNN_ALONE) or from random weights (GNN_SCRATCH); with ``--ensemble N`` its seeds are averaged
#: with equal weights (members of one kind are, whatever the recipe's weights).
GNN_ALONE = ["--members", "gnn"]
GNN_SCRATCH = [*GNN_ALONE, *SCRATCH]
#: ``load_config``/``--set`` override: from random weights (any architecture is allowed).
SCRATCH_SET = "train.init=none"
#: The estimators' keyword arguments for the same run (add ``SCRATCH_SET`` to ``overrides``).
ESTIMATOR_GNN = {"members": "gnn"}
