"""Helpers shared by the test suites (real servers, dependency checks)."""
