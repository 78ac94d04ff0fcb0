"""Example jobs (also used by the demo command and the tests)."""
