"""Everything a run can hold behind one small interface (:class:`~siggate.predictors.base.Predictor`):
a GNN run, a fingerprint kernel or tree model, and a weighted combination of them."""
