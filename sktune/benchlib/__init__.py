"""Benchmarks of the search itself (benchmarks/search_efficiency.py drives them)."""
