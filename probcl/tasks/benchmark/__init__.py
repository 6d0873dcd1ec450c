"""`probcl benchmark`: a grid of methods x seeds trained and evaluated cell by cell, its results, reports and claims.

:mod:`.run` runs the cells (several workers may share a benchmark), :mod:`.grid` reads the benchmark file into
cells, :mod:`.extends` resolves `extends:`, :mod:`.budgets` the same study at other budgets, :mod:`.results`
publishes cells and rebuilds results.json and the reports.
"""
