"""The dispute listing's decisions (recon.reconcile.disputes) on both databases, and the ``disputes`` job that runs
it under the engine: a dispute of a payment we do not know is counted, never stored; one naming another PSP
reference than our payment's is a discrepancy (evidence naming both, the payment to review), never recorded on ours;
a known dispute moves only forward. The listing here is a scripted DisputeSource (the adapters' own listings are
tests/adapters/test_dispute_listing.py, and against the sandbox tests/integration/test_dispute_sandbox.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator
from datetime import UTC, datetime, timedelta
from typing import ClassVar

import pytest

from psp_adapters.errors import PspTransientError
from psp_adapters.protocol import DisputeNews, DisputePage, ListedDispute, NotFound, PaymentOutcome, PspRef
from recon.app import App
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.dispute_rows import DisputeStatus
from recon.errors import ConfigError
from recon.reconcile.periodic import check_payload
from recon.rows import EventSource, JobState, NewPayment, PaymentStatus, Transition

P = PaymentStatus
D = DisputeStatus
AT = datetime(2026, 11, 20, 10, tzinfo=UTC)


class Listing:
    """An adapter whose dispute listing is ``pages`` (one request each); it lists nothing else."""

    #: not "adyen": recon.payments.instrumented caches its wrapper class per adapter name, with the capabilities
    #: of the first adapter it wrapped; a stub named like a real PSP would leak into later tests in this process
    name: ClassVar[str] = "dispute-listing-stub"
    idempotency_retention = None
    lists_payments: ClassVar[bool] = False

    def __init__(self, *pages: DisputePage) -> None:
        self.pages = list(pages)
        self.asked: list[tuple[datetime, datetime]] = []

    def iter_disputes(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[DisputePage]:
        self.asked.append((since, until))
        return iter(self.pages)

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        return NotFound(psp_reference=ref.psp_reference)

    def close(self) -> None:
        pass


def listed(psp_reference: str, ref: str | None, state: str, *, amount: int = 5000) -> ListedDispute:
    return ListedDispute(
        DisputeNews(
            psp_reference=psp_reference,
            merchant_reference=ref,
            amount=amount,
            currency="EUR",
            raw_status=state,
            state=state,
            dispute_id=psp_reference,
        ),
        created_at=AT,
        merchant_account="ShopECOM",
    )


@pytest.fixture
def paid(db: Database) -> int:
    """A succeeded Adyen payment, order-1, whose PSP reference is P-OURS."""
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("ShopECOM", "order-1", 5000, "EUR", "adyen")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, P.CREATED, P.SUCCEEDED, EventSource.CHARGE, psp_reference="P-OURS"))
    return pid


def app_with(db_url: str, adapter: Listing) -> App:
    return App(database_url=db_url, adapter_factory=lambda _name: adapter)  # type: ignore[arg-type,return-value]


def fetch(db_url: str, adapter: Listing) -> dict[str, object]:
    app = app_with(db_url, adapter)
    try:
        return app.fetch_disputes("adyen", AT - timedelta(days=1), AT + timedelta(days=1)).to_dict()
    finally:
        app.close()


def test_listing__another_psp_reference_is_a_discrepancy_never_recorded_on_ours(
    db: Database, db_url: str, paid: int
) -> None:
    got = fetch(db_url, Listing((listed("P-THEIRS", "order-1", "opened"),)))
    assert got == {"new": 0, "moved": 0, "same": 0, "unknown": [], "conflicts": ["P-THEIRS"]}
    app = app_with(db_url, Listing())
    assert app.disputes.for_payment(paid) == []
    payment = app.payments.get(paid)
    assert payment is not None and payment.status is P.NEEDS_REVIEW
    assert (payment.review_reason or "").startswith("reference_conflict: ours is P-OURS")
    [*_, event] = app.payments.events(paid)
    assert (event.source, event.details["psp_reference_conflict"]) == (
        "reconcile",
        {"ours": "P-OURS", "theirs": ["P-THEIRS"]},
    )
    app.close()


def test_listing__a_dispute_of_a_payment_we_do_not_know_is_counted_not_stored(
    db: Database, db_url: str, paid: int
) -> None:
    got = fetch(db_url, Listing((listed("P-NOBODY", "order-nobody", "opened"),)))
    assert got["unknown"] == ["P-NOBODY"] and got["new"] == 0


def test_listing__new_then_forward_only(db: Database, db_url: str, paid: int) -> None:
    assert fetch(db_url, Listing((listed("P-OURS", "order-1", "opened"),), (listed("P-OURS", "order-1", "lost"),))) == {
        "new": 1,
        "moved": 1,
        "same": 0,
        "unknown": [],
        "conflicts": [],
    }
    # an older word (opened) and one the order does not allow after lost (reversed): noted, never moved back
    assert (
        fetch(
            db_url,
            Listing(
                (listed("P-OURS", "order-1", "opened"), listed("P-OURS", "order-1", "reversed")),
            ),
        )["same"]
        == 2
    )
    app = app_with(db_url, Listing())
    [dispute] = app.disputes.for_payment(paid)
    assert dispute.status is D.LOST
    assert [(e.from_status, e.to_status, e.source) for e in app.disputes.events(dispute.id)] == [
        (None, D.OPENED, "listing"),
        (D.OPENED, D.LOST, "listing"),
        (D.LOST, D.LOST, "listing"),
        (D.LOST, D.LOST, "listing"),
    ]
    payment = app.payments.get(paid)
    assert payment is not None and payment.status is P.NEEDS_REVIEW  # a chargeback: a person looks
    assert (payment.review_reason or "").startswith("psp_reversed: disputed (chargeback) 50.00 EUR")
    app.close()


def test_disputes_job__reads_the_listing_under_a_lease(db: Database, db_url: str, paid: int) -> None:
    adapter = Listing((listed("P-OURS", "order-1", "opened"),))
    app = app_with(db_url, adapter)
    queue = app.settings.engine.default_queue
    job_id = app.client().enqueue("disputes", {"psp": "adyen", "days_back": 3}, queue=queue)
    bad = app.client().enqueue("disputes", {"psp": "adyen", "days_back": 0}, queue=queue)
    app.worker([queue], handlers=app.handlers(kinds=("disputes",))).run(burst=True)
    assert app.jobs.get(job_id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    dead = app.jobs.get(bad)
    assert dead is not None and dead.state is JobState.DEAD and "days_back" in (dead.last_error or "")
    [(since, until)] = adapter.asked
    assert (until - since).days == 4 and since.tzinfo is not None  # three days back, through tomorrow
    [dispute] = app.disputes.for_payment(paid)
    assert dispute.status is D.OPENED
    assert [e.job_id for e in app.disputes.events(dispute.id)] == [job_id]
    app.close()


def test_schedule__a_disputes_payload_is_checked_at_startup() -> None:
    check_payload("disputes", {"psp": "stripe", "days_back": 30}, "recon.toml: schedule.d", psp_names=("stripe",))
    with pytest.raises(ConfigError, match=r"schedule\.d\.payload: days_back"):
        check_payload("disputes", {"psp": "stripe", "days_back": 999}, "recon.toml: schedule.d", psp_names=("stripe",))
    with pytest.raises(ConfigError, match="unknown key"):
        check_payload("disputes", {"psp": "stripe", "day": 1}, "recon.toml: schedule.d", psp_names=("stripe",))


class Dated(Listing):
    """A Stripe-like listing by creation: it lists a dispute only when the window asked holds its ``created_at``
    (``psp_adapters.protocol.DisputeSource``: Stripe lists the disputes created in ``[since, until)``), with what it
    says of the dispute now; ``fail``: the read raises a PspError after nothing was listed."""

    def __init__(self, *disputes: ListedDispute, fail: bool = False) -> None:
        super().__init__()
        self.disputes, self.fail = disputes, fail

    def iter_disputes(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[DisputePage]:
        self.asked.append((since, until))
        if self.fail:
            raise PspTransientError("listing: 503", psp="stripe")
        return iter([tuple(d for d in self.disputes if since <= d.created_at < until)])


def dated(state: str, created_at: datetime) -> ListedDispute:
    return dataclasses.replace(listed("P-OURS", "order-1", state), created_at=created_at)


MIDNIGHT = datetime(2026, 11, 20, tzinfo=UTC)


def test_rolling__a_dispute_won_weeks_after_it_opened_is_caught_by_reaching_back_to_it(
    db: Database, db_url: str, paid: int
) -> None:
    """Opened 30 days before the window of three days: the window reaches back to its opening (less the three days
    Stripe may retry a webhook), so its win is read."""
    opened = MIDNIGHT - timedelta(days=30) + timedelta(hours=9)
    app = app_with(db_url, Dated(dated("opened", opened)))
    first = app.fetch_disputes("adyen", opened - timedelta(hours=1), opened + timedelta(hours=1))  # as given
    assert first.to_dict()["new"] == 1
    [dispute] = app.disputes.for_payment(paid)
    assert dispute.opened_at == opened  # the listing says when the PSP opened it
    app.close()
    adapter = Dated(dated("won", opened))
    app = app_with(db_url, adapter)
    since, until = MIDNIGHT - timedelta(days=3), MIDNIGHT + timedelta(days=1)
    result = app.fetch_disputes("adyen", since, until, rolling=True)
    assert adapter.asked == [(MIDNIGHT - timedelta(days=33), until)]  # 30 days back, less 3, at midnight
    assert result.window == adapter.asked[0] and result.to_dict()["moved"] == 1
    [dispute] = app.disputes.for_payment(paid)
    assert dispute.status is D.WON
    narrow = Dated(dated("lost", opened))  # the same window read as given (not rolling) sees nothing of it
    app.close()
    app = app_with(db_url, narrow)
    assert app.fetch_disputes("adyen", since, until).to_dict()["same"] == 0
    assert narrow.asked == [(since, until)]
    app.close()


def test_rolling__a_read_that_failed_leaves_no_gap_the_next_one_starts_at_the_last_read(
    db: Database, db_url: str, paid: int
) -> None:
    read = Dated()
    app = app_with(db_url, read)
    app.fetch_disputes("adyen", MIDNIGHT - timedelta(days=3), MIDNIGHT + timedelta(days=1), rolling=True)
    assert app.disputes.listing_reach("adyen") == (MIDNIGHT + timedelta(days=1), None)
    app.close()
    later = MIDNIGHT + timedelta(days=10)
    failing = Dated(fail=True)
    app = app_with(db_url, failing)
    with pytest.raises(PspTransientError):
        app.fetch_disputes("adyen", later - timedelta(days=3), later + timedelta(days=1), rolling=True)
    assert app.disputes.listing_reach("adyen")[0] == MIDNIGHT + timedelta(days=1)  # the cursor stays
    app.close()
    created = MIDNIGHT + timedelta(days=2, hours=5)  # opened while the reads failed, before the next window
    again = Dated(dated("opened", created))
    app = app_with(db_url, again)
    got = app.fetch_disputes("adyen", later - timedelta(days=3), later + timedelta(days=1), rolling=True)
    assert again.asked == [(MIDNIGHT + timedelta(days=1), later + timedelta(days=1))]
    assert got.to_dict()["new"] == 1
    assert app.disputes.listing_reach("adyen")[0] == later + timedelta(days=1)
    # an older window read later never moves the cursor back
    app.fetch_disputes("adyen", MIDNIGHT - timedelta(days=3), MIDNIGHT, rolling=True)
    assert app.disputes.listing_reach("adyen")[0] == later + timedelta(days=1)
    app.close()


def test_rolling__reaches_back_at_most_window_max_days(db: Database, db_url: str, paid: int) -> None:
    opened = MIDNIGHT - timedelta(days=200)
    app = app_with(db_url, Dated(dated("opened", opened)))
    app.fetch_disputes("adyen", opened - timedelta(days=1), opened + timedelta(days=1))
    app.close()
    adapter = Dated()
    app = app_with(db_url, adapter)
    app.fetch_disputes("adyen", MIDNIGHT - timedelta(days=3), MIDNIGHT + timedelta(days=1), rolling=True)
    assert adapter.asked == [(MIDNIGHT + timedelta(days=1) - timedelta(days=120), MIDNIGHT + timedelta(days=1))]
    app.close()


def test_disputes_job__days_back_reaches_back_to_the_oldest_open_dispute(db: Database, db_url: str, paid: int) -> None:
    now = datetime.now(UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    opened = today - timedelta(days=20) + timedelta(hours=3)
    app = app_with(db_url, Dated(dated("opened", opened)))
    app.fetch_disputes("adyen", opened - timedelta(hours=1), opened + timedelta(hours=1))
    app.close()
    adapter = Dated(dated("lost", opened))
    app = app_with(db_url, adapter)
    queue = app.settings.engine.default_queue
    job_id = app.client().enqueue("disputes", {"psp": "adyen", "days_back": 3}, queue=queue)
    app.worker([queue], handlers=app.handlers(kinds=("disputes",))).run(burst=True)
    assert app.jobs.get(job_id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    assert adapter.asked == [(today - timedelta(days=23), today + timedelta(days=1))]
    [dispute] = app.disputes.for_payment(paid)
    assert dispute.status is D.LOST
    assert app.disputes.listing_reach("adyen")[0] == today + timedelta(days=1)
    app.close()
