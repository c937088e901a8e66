"""The money-at-risk chart's bars against the page (WCAG 2.1 AA, 1.4.11 non-text contrast: at least 3:1), the
ratio computed here by WCAG's own formula (relative luminance, sRGB), not by recon."""

from __future__ import annotations

import pytest

from recon.console.charts import BUCKET_COLOURS, money_at_risk_chart

PAGE = "#ffffff"  #: a section's background (console.css)


def luminance(colour: str) -> float:
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


@pytest.mark.parametrize("bucket", sorted(BUCKET_COLOURS))
def test_chart__every_bar_has_at_least_3_to_1_contrast_with_the_page(bucket: str) -> None:
    assert contrast(BUCKET_COLOURS[bucket], PAGE) >= 3.0


def test_chart__scales_to_the_screen_and_links_each_bar_to_its_payments() -> None:
    svg = str(money_at_risk_chart([{"currency": "EUR", "age": "1h_1d", "count": 2, "amount": 123456}]))
    assert 'width="720"' not in svg and 'viewBox="0 0 720 ' in svg
    assert '<a href="/payments?status=unfinished&amp;currency=EUR&amp;age=1h_1d">' in svg
