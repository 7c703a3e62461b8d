"""Parts of bench/eos_throughput.py: the JVM contenders, the latency run, what they measure.

A package, not modules beside the scripts: `make bench` runs every ``bench/*.py``.
"""
