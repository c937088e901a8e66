"""The dispute state machine (recon.dispute_rows): the table docs/design.md states, and a status order without
cycles, so late or repeated news never moves a dispute back."""

from __future__ import annotations

from recon.dispute_rows import DISPUTE_TRANSITIONS, DisputeStatus

D = DisputeStatus


def test_transitions__the_documented_table() -> None:
    assert {s: set(t) for s, t in DISPUTE_TRANSITIONS.items()} == {
        D.OPENED: {D.WON, D.LOST, D.REVERSED},
        D.WON: {D.LOST},
        D.REVERSED: {D.LOST},  # Adyen's SECOND_CHARGEBACK after CHARGEBACK_REVERSED
        D.LOST: set(),
    }


def test_transitions__no_status_is_reached_again() -> None:
    for start in D:
        seen: set[DisputeStatus] = set()
        frontier = set(DISPUTE_TRANSITIONS[start])
        while frontier:
            assert start not in frontier, f"{start} can come back"
            seen |= frontier
            frontier = {n for s in frontier for n in DISPUTE_TRANSITIONS[s]} - seen
