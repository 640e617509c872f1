"""The names of the files that a training run's folder holds, one home for every module that
writes or reads them (:mod:`.record` writes them, :mod:`.rundir` guards the folder,
:mod:`.checkpoint` names what is missing). No imports: the lightest modules use it.
(:mod:`siggate.config`, below ``train``, spells ``config.yaml`` in one message of its own.)"""

#: the run's config, written before its first epoch and read back by ``--resume``
CONFIG = "config.yaml"
#: the checkpoint of the best validation epoch so far (of the last epoch for a run that keeps its
#: last): the model that ``predict`` and ``evaluate`` read
BEST = "best.pt"
#: the checkpoint after the latest epoch, from which ``--resume`` goes on
LAST = "last.pt"
#: the run's record (metrics, history, timings), written when it finishes
METRICS = "metrics.json"
