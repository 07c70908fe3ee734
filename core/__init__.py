"""The currency every stage shares: TestCase, Verdict, signatures, settings.

`core` imports no pipeline stage; every stage may import `core`.
"""

__version__ = "0.1.0"
