"""What bench/eos_throughput.py prints: each contender's figures, the ratios, the latency."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from eos.latency import LatencyRun

#: The overhead of metrics on exactly_once throughput that issue 12 allows.
METRICS_OVERHEAD_TARGET = 0.03


@dataclass(frozen=True)
class Figure:
    """One contender's result."""

    name: str
    records: int
    seconds: float
    value_bytes: int
    rss_mb: float | None = None

    @property
    def records_per_s(self) -> float:
        """Throughput in records per second."""
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        """Throughput in MB (10^6 bytes) of values per second."""
        return self.records * self.value_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def median_round(rounds: Sequence[Figure]) -> Figure:
    """The round of median records/s (the lower middle of an even count), with the peak RSS
    of every round: one round on two shared cores moves by a fifth (README, issue 13)."""
    ordered = sorted(rounds, key=lambda f: f.records_per_s)
    middle = ordered[(len(ordered) - 1) // 2]
    peaks = [f.rss_mb for f in rounds if f.rss_mb is not None]
    return replace(middle, rss_mb=max(peaks) if peaks else None)


def print_rounds(rounds: Mapping[str, Sequence[Figure]]) -> None:
    """Every round's records/s of each contender run more than once, and (a)'s ratio to
    each of them round by round (the table shows the median round)."""
    if max((len(r) for r in rounds.values()), default=0) < 2:
        return
    print("\nrecords/s by round (the table shows the median round, with the peak RSS of all):")
    for key, figures in rounds.items():
        print(f"    ({key}) " + " · ".join(f"{f.records_per_s:,.0f}" for f in figures))
    a = rounds.get("a", ())
    for key, figures in rounds.items():
        if key != "a" and len(figures) == len(a):
            ratios = [x.records_per_s / y.records_per_s for x, y in zip(a, figures, strict=True)]
            print(
                f"    a/{key} by round "
                + " · ".join(f"{r:.3f}" for r in ratios)
                + f" (median {statistics.median(ratios):.3f})"
            )


def print_figures(figures: dict[str, Figure]) -> None:
    """The table and the ratios of (a) to every other contender."""
    print(f"\n{'contender':<40}{'records/s':>12}{'MB/s':>9}{'seconds':>9}{'peak RSS':>12}")
    for figure in sorted(figures.values(), key=lambda f: f.name):
        shown = f"{figure.rss_mb:,.0f} MB" if figure.rss_mb is not None else "-"
        print(
            f"{figure.name:<40}{figure.records_per_s:>12,.0f}{figure.mb_per_s:>9.2f}"
            f"{figure.seconds:>9.1f}{shown:>12}"
        )
    a = figures["a"].records_per_s
    # (c0), (c) with librdkafka's default prefetch, is shown for comparison: no target.
    targets = {"b": 0.9, "c": 1.0, "c0": None, "d": 1.0, "e": 1.0, "f": 1.0}
    # Three decimals and the verdict: 0.995 printed as "1.00" read as a target met.
    ratios = [
        f"a/{key} = {ratio:.3f} ("
        + (
            "no target"
            if target is None
            else f"target >= {target}: {'met' if ratio >= target else 'missed'}"
        )
        + ")"
        for key, target in targets.items()
        if key in figures
        for ratio in [a / figures[key].records_per_s]
    ]
    print("\n" + "    ".join(ratios[:3]))
    if ratios[3:]:
        print("    ".join(ratios[3:]))
    if "m" in figures:
        overhead = 1 - figures["m"].records_per_s / a
        verdict = "within" if overhead < METRICS_OVERHEAD_TARGET else "over"
        print(
            f"metrics overhead = 1 - m/a = {overhead:+.1%} ({verdict} the < "
            f"{METRICS_OVERHEAD_TARGET:.0%} target; a run is timed to its last commit, so "
            "small runs carry about one checkpoint interval of noise)"
        )


def print_latency(run: LatencyRun, *, label: str, checkpoint_interval_ms: int) -> None:
    """A latency run's figures against the p99 <= 2 x checkpoint interval target, and the
    cores each watched process used meanwhile."""
    target = 2 * checkpoint_interval_ms
    verdict = "within" if run.p99_ms <= target and not run.missing else "over"
    print(
        f"\nlatency ({label}, produce -> visible to read_committed): {run.records:,} records"
        f" at {run.achieved_rate:,.0f}/s (asked {run.target_rate:,.0f}/s, half of (a)):"
        f" p50 {run.p50_ms:,.0f} ms, p99 {run.p99_ms:,.0f} ms, max {run.max_ms:,.0f} ms;"
        f" {verdict} the p99 <= {target} ms target (2 x the checkpoint interval)"
        + (f"; {run.missing} NOT VISIBLE" if run.missing else "")
    )
    if run.warmup_records:
        print(
            f"    before them, {run.warmup_records:,} warm-up records at the same rate, not"
            f" counted: p99 {run.warmup_p99_ms:,.0f} ms"
        )
    if run.cores:
        used = ", ".join(f"{name} {cores:.2f}" for name, cores in run.cores.items())
        print(
            f"    cores used while producing the measured records: {used};"
            f" {sum(run.cores.values()):.2f} in all"
        )
