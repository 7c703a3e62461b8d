"""Scraping a service's Prometheus endpoint (``--metrics-listen``) over HTTP, as Prometheus
does, and reading one series out of the text."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(address: str, *, timeout_s: float = 5.0) -> str:
    """``GET http://ADDRESS/metrics``: the exposition text (raises on any HTTP error)."""
    # No proxy: loopback must never be sent to an HTTP proxy the environment names.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{address}/metrics", timeout=timeout_s) as answer:
        body: bytes = answer.read()
        return body.decode("utf-8")


def series_value(text: str, series: str, **labels: str) -> float | None:
    """The sum of ``series``'s samples whose labels include ``labels`` (None: no sample)."""
    found: float | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == series and all(sample.labels.get(k) == v for k, v in labels.items()):
                found = (found or 0.0) + sample.value
    return found


def series_labels(text: str, series: str) -> list[dict[str, str]]:
    """The label sets of every sample of ``series``."""
    return [
        dict(sample.labels)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == series
    ]
