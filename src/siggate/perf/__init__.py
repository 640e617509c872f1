"""Performance measurement: ``siggate bench`` (:mod:`siggate.perf.bench`) and the shared
interleaved timer (:mod:`siggate.perf.timer`, also used by ``siggate analyze overhead``).

May import :mod:`siggate.train`, :mod:`siggate.data`, :mod:`siggate.nn` and the leaf modules;
nothing below it imports ``perf``.
"""
