"""The server's counters and histograms, rendered in the Prometheus text exposition format (version 0.0.4) by hand:
a few lines of text need no client library. Updated from the event loop's thread only."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

PREFIX = "adapterfusion_serve"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class Histogram:
    """Cumulative buckets, sum and count, as Prometheus histograms are."""

    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.bounds, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out, running = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            running += count
            out.append(f'{name}_bucket{{le="{_number(bound)}"}} {running}')
        out += [
            f'{name}_bucket{{le="+Inf"}} {self.count}',
            f"{name}_sum {_number(self.total)}",
            f"{name}_count {self.count}",
        ]
        return out


@dataclass
class Metrics:
    """What the server counts: requests by endpoint and status, predict latency, rows per forward, rows predicted,
    forwards that failed."""

    requests: Counter[tuple[str, int]] = field(default_factory=Counter)
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    batch_rows: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))
    predictions: int = 0
    failed_forwards: int = 0

    def render(self, gauges: Mapping[str, tuple[float, str]]) -> str:
        """The exposition text; `gauges` maps a name to (value, help) for values read at scrape time."""
        blocks = [
            _block(
                "requests_total",
                "counter",
                "HTTP requests by endpoint and status code.",
                [
                    f'{PREFIX}_requests_total{{endpoint="{endpoint}",status="{status}"}} {count}'
                    for (endpoint, status), count in sorted(self.requests.items())
                ],
            ),
            _block(
                "predict_latency_seconds",
                "histogram",
                "Time from receiving a predict request to its answer (answered requests only).",
                self.latency.lines(f"{PREFIX}_predict_latency_seconds"),
            ),
            _block(
                "batch_rows", "histogram", "Inputs run in one forward.", self.batch_rows.lines(f"{PREFIX}_batch_rows")
            ),
            _block(
                "predictions_total",
                "counter",
                "Inputs answered (predicted, or generated from).",
                [f"{PREFIX}_predictions_total {self.predictions}"],
            ),
            _block(
                "failed_forwards_total",
                "counter",
                "Forwards that raised (then each request ran alone: refused by a check 422, failing 500).",
                [f"{PREFIX}_failed_forwards_total {self.failed_forwards}"],
            ),
        ]
        for name, (value, help_text) in sorted(gauges.items()):
            blocks.append(_block(name, "gauge", help_text, [f"{PREFIX}_{name} {_number(value)}"]))
        return "".join(blocks)


def _block(name: str, kind: str, help_text: str, samples: list[str]) -> str:
    return f"# HELP {PREFIX}_{name} {help_text}\n# TYPE {PREFIX}_{name} {kind}\n" + "".join(f"{s}\n" for s in samples)


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))
