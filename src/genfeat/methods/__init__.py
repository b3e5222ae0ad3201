"""Method runners: each wires a recipe's config into a model, objectives and a schedule.

A module here registers its runner with :func:`genfeat.runner.register_method`; recipes name the
method with ``method: NAME``.
"""
