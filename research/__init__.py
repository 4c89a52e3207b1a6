"""Research studies behind the project's documented choices, kept in the checkout and out of the wheel: nothing
of ``belief_tasks`` imports them at run time. ``scripts/`` runs them, ``tests/`` checks them, ``docs/`` quotes
their tables (``budget_coverage``: the coverage of a budgeted run's intervals, docs/budget.md)."""
