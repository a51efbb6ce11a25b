"""txnstream benchmarks (``make bench``): figure groups registered in :mod:`benchmarks.core`.

Each group module (``b1_produce``, ``b2_consume``, ...) registers one function with
:func:`benchmarks.core.group`; ``benchmarks/run.py`` runs the selected groups, prints a
table and writes ``bench-results.json``. To add a group, write a module with a
``@group("Bn", ...)`` function returning :class:`benchmarks.core.Figure` objects and list
it in :data:`benchmarks.run.GROUP_MODULES`.
"""
