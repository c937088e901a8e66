"""Charts as inline SVG, drawn on the server: no script, nothing fetched, readable without CSS.

``money_at_risk_chart`` draws the unfinished payments of ``recon stats --json`` (``payments.unfinished``:
currency, age bucket, count, amount in minor units) as one group of horizontal bars per currency, a bar per
age bucket. Currencies are not comparable, so each group has its own scale (its largest bucket spans the
full width); every bar is labelled with its amount in major units and its count. Widths are integer
arithmetic on minor units: no float ever touches an amount.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from markupsafe import Markup, escape

from recon.payments.money import format_amount

#: the age buckets of PaymentStore.money_at_risk, youngest first
BUCKETS = ("lt_1h", "1h_1d", "1d_7d", "gt_7d")
BUCKET_LABELS = {"lt_1h": "under 1 h", "1h_1d": "1 h to 1 d", "1d_7d": "1 d to 7 d", "gt_7d": "over 7 d"}
#: older is worse: blue, then ever darker ambers and reds; each at least 3:1 against the white page (WCAG 2.1
#: AA, 1.4.11 non-text contrast), as tests/unit/test_charts.py checks with the WCAG formula
BUCKET_COLOURS = {"lt_1h": "#2b6cb0", "1h_1d": "#9a6700", "1d_7d": "#c2410c", "gt_7d": "#7f1d1d"}

WIDTH = 720
LABEL_X = 8  #: the currency label
BAR_X = 170  #: where bars start
BAR_MAX = 360  #: the longest bar
BAR_H = 16
GAP = 4
GROUP_GAP = 14


def money_by_currency(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, tuple[int, int]]]:
    """currency -> bucket -> (count, amount in minor units), currencies sorted."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for row in rows:
        buckets = out.setdefault(str(row["currency"]), {})
        count, amount = buckets.get(str(row["age"]), (0, 0))
        buckets[str(row["age"])] = (count + int(row["count"]), amount + int(row["amount"]))
    return dict(sorted(out.items()))


def money_at_risk_chart(rows: Iterable[Mapping[str, Any]]) -> Markup:
    """The SVG (see the module docstring); an empty chart says so."""
    groups = money_by_currency(rows)
    if not groups:
        return Markup('<p class="empty">No unfinished payments: no money at risk.</p>')
    parts: list[str] = []
    y = GAP
    for currency, buckets in groups.items():
        parts.append(_group(currency, buckets, y))
        y += len(BUCKETS) * (BAR_H + GAP) + GROUP_GAP
    legend = "".join(_legend_item(i, bucket) for i, bucket in enumerate(BUCKETS))
    height = y + BAR_H + GAP
    # no fixed width: the viewBox scales the chart down to a narrow screen (390 px), never past WIDTH
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
           f'viewBox="0 0 {WIDTH} {height}" aria-label="money at risk by currency and age">'
           f'{"".join(parts)}<g transform="translate(0,{y})">{legend}</g></svg>')
    return Markup(svg)  # nosec B704  # every text inside is escaped by _text


def _group(currency: str, buckets: Mapping[str, tuple[int, int]], y: int) -> str:
    largest = max((amount for _, amount in buckets.values()), default=0) or 1
    total = sum(amount for _, amount in buckets.values())
    out = [_text(LABEL_X, y + BAR_H - 3, currency, cls="currency"),
           _text(LABEL_X, y + 2 * BAR_H + GAP - 3, format_amount(total, currency), cls="total")]
    for i, bucket in enumerate(BUCKETS):
        count, amount = buckets.get(bucket, (0, 0))
        top = y + i * (BAR_H + GAP)
        width = amount * BAR_MAX // largest if amount else 0
        label = f"{format_amount(amount, currency)} ({count})" if count else "-"
        title = f"{currency} {BUCKET_LABELS[bucket]}: {count} payments, {format_amount(amount, currency)}"
        link = f"/payments?status=unfinished&amp;currency={quote(currency)}&amp;age={bucket}"
        out.append(f'<a href="{link}"><g data-currency="{escape(currency)}" data-bucket="{bucket}">'
                   f'<title>{escape(title)}</title>'
                   f'<rect x="{BAR_X}" y="{top}" width="{max(width, 1 if amount else 0)}" height="{BAR_H}" '
                   f'fill="{BUCKET_COLOURS[bucket]}"></rect>'
                   f'{_text(BAR_X + width + 6, top + BAR_H - 3, label, cls="bar-label")}</g></a>')
    return "".join(out)


def _legend_item(i: int, bucket: str) -> str:
    x = BAR_X + i * 130
    return (f'<rect x="{x}" y="0" width="{BAR_H}" height="{BAR_H}" fill="{BUCKET_COLOURS[bucket]}"></rect>'
            f'{_text(x + BAR_H + 6, BAR_H - 3, BUCKET_LABELS[bucket], cls="legend")}')


def _text(x: int, y: int, text: str, *, cls: str) -> str:
    return f'<text x="{x}" y="{y}" class="{cls}" font-size="12" font-family="sans-serif">{escape(text)}</text>'
