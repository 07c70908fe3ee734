"""Defaults that several stages must agree on, kept in one place.

The value search budget has one name on its whole way, `value_search_budget_ms`: the setting
(`NNFORGE_VALUE_SEARCH_BUDGET_MS`), the campaign's and the executor's config, the oracle, the
reducer, the worker's job payload; only the search itself calls it `budget_ms`, its own field.
A search that succeeds is done in a few milliseconds (median at 20 nodes: ~4 ms), so the budget
only bounds the hard and hopeless ones. 500 ms repairs about half a percent more generated
programs than 200 ms did (bench/oracle.py) and costs a campaign little next to a ~1-2 s compile.
"""

VALUE_SEARCH_BUDGET_MS = 500.0
