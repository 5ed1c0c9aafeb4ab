"""seqlake's benchmarks and the synthetic data they share, apart from the library packages.

Each module measures one thing side by side with its baselines and reports ratios; `seqlake bench-*`
runs them (jobs/bench_*.py). `benchmarks.synthetic` is the one generator of synthetic history rows.
"""
