"""Speed and scaling benchmarks (run as ``python -m benchmarks.<name> --json``)."""
