"""Run storage: the directory a bench run writes and every reader of a run opens (``latscope bench``, ``report``,
``compare``, the span export).

``records``    timelines → rows of the ``requests`` and ``events`` tables (their Arrow schemas)
``storage``    the run directory: Parquet part files, their merge, ``run.json``

A layer of its own below ``load``, ``report`` and ``export``: it knows timelines and server signals, nothing of how
the load was generated or how a run is shown.
"""
