"""SQLAlchemy Core tables: a mirror of ``migrations/`` (tests/integration/test_schema.py diffs the two).

Timestamps are ``timestamptz`` on PostgreSQL and integer microseconds since the Unix epoch on SQLite, so
that SQLite compares and adds them as plain integers; ``recon.db.jobs_store`` converts both to aware datetimes.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

#: job states, with the database labels as values (recon.engine.jobs.JobState mirrors them)
JOB_STATES = ("pending", "runnable", "leased", "succeeded", "retryable", "dead", "canceled")
#: states a worker may claim (when run_after has passed)
CLAIMABLE_STATES = ("pending", "runnable", "retryable")
#: states that end a job
FINISHED_STATES = ("succeeded", "dead", "canceled")
#: how an attempt ended
ATTEMPT_OUTCOMES = ("succeeded", "retried", "snoozed", "dead", "canceled", "lease_expired", "released")

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


metadata = sa.MetaData()

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("queue", sa.Text(), nullable=False),
    sa.Column("kind", sa.Text(), nullable=False),
    sa.Column("payload", Json, nullable=False),
    sa.Column("state", sa.Text(), nullable=False),
    sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("run_after", Timestamp, nullable=False),
    sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("max_attempts", sa.Integer(), nullable=False),
    sa.Column("lease_owner", sa.Text(), nullable=True),
    sa.Column("lease_until", Timestamp, nullable=True),
    sa.Column("heartbeat_at", Timestamp, nullable=True),
    sa.Column("attempted_at", Timestamp, nullable=True),
    sa.Column("unique_key", sa.Text(), nullable=True),
    sa.Column("last_error_kind", sa.Text(), nullable=True),
    sa.Column("last_error", sa.Text(), nullable=True),
    sa.Column("tenant", sa.Text(), nullable=True),
    sa.Column("progress", Json, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("free_attempts", sa.Integer(), nullable=False, server_default="0"),
    sa.CheckConstraint(_in("state", JOB_STATES), name="jobs_state_valid"),
    sa.CheckConstraint("attempts >= 0 AND max_attempts >= 1", name="jobs_attempts_valid"),
    sa.CheckConstraint(
        "state <> 'leased' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL)", name="jobs_lease_complete"
    ),
    sa.Index(
        "jobs_claimable",
        "queue", sa.text("priority DESC"), "run_after", "id",
        postgresql_where=sa.text(_in("state", CLAIMABLE_STATES)),
        sqlite_where=sa.text(_in("state", CLAIMABLE_STATES)),
    ),
    sa.Index(
        "jobs_leased_expiry",
        "lease_until",
        postgresql_where=sa.text("lease_until IS NOT NULL"),
        sqlite_where=sa.text("lease_until IS NOT NULL"),
    ),
    sa.Index(
        "jobs_unique_key_unfinished",
        "unique_key",
        unique=True,
        postgresql_where=sa.text(f"unique_key IS NOT NULL AND NOT {_in('state', FINISHED_STATES)}"),
        sqlite_where=sa.text(f"unique_key IS NOT NULL AND NOT {_in('state', FINISHED_STATES)}"),
    ),
    sa.Index(
        "jobs_finished_at",
        "finished_at",
        postgresql_where=sa.text(_in("state", FINISHED_STATES)),
        # the same rows, by the column only a finish sets: SQLite's claims then never touch it (migration 0030)
        sqlite_where=sa.text("finished_at IS NOT NULL"),
    ),
    sa.Index(
        "jobs_dead",
        "queue", "kind",
        postgresql_where=sa.text("state = 'dead'"),
        sqlite_where=sa.text("state = 'dead'"),
    ),
    # SQLite: AUTOINCREMENT, so a deleted (pruned) job's id is never handed out again: ids stay unique
    # across the table's life, as PostgreSQL's identity does, and old history rows never collide.
    sqlite_autoincrement=True,
)

job_attempts = sa.Table(
    "job_attempts",
    metadata,
    # No foreign key to jobs: its check was a large share of a grouped finish on PostgreSQL. Rows are
    # only inserted from a fenced UPDATE of their job in the same statement or transaction, and
    # pruning deletes a job's attempts with the job.
    sa.Column("job_id", Id, primary_key=True),
    sa.Column("attempt", sa.Integer(), primary_key=True),
    sa.Column("worker", sa.Text(), nullable=False),
    sa.Column("started_at", Timestamp, nullable=True),
    sa.Column("finished_at", Timestamp, nullable=False),
    sa.Column("outcome", sa.Text(), nullable=False),
    sa.Column("error_kind", sa.Text(), nullable=True),
    sa.Column("error", sa.Text(), nullable=True),
    sa.CheckConstraint(_in("outcome", ATTEMPT_OUTCOMES), name="job_attempts_outcome_valid"),
)

# --- dead-letter replays (migration 0005) -------------------------------------------------------------------

job_replays = sa.Table(
    "job_replays",
    metadata,
    # One row per replay of a dead job, keyed like job_attempts by (job_id, attempt): ``attempt`` is the
    # job's attempts (the fencing token) when it was replayed, so the replay sorts between that attempt and
    # the next claim. A job dies again only through a new claim, so it is replayed at most once per attempt.
    # The foreign key cascades: replays are rare, and no prune or manual delete can orphan them.
    sa.Column("job_id", Id, sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("attempt", sa.Integer(), primary_key=True),
    sa.Column("replayed_at", Timestamp, nullable=False),
    sa.Column("max_attempts_before", sa.Integer(), nullable=False),
    sa.Column("max_attempts_after", sa.Integer(), nullable=False),
    sa.Column("error_kind", sa.Text(), nullable=True),
    sa.Column("replayed_by", sa.Text(), nullable=True),
)


PAYMENT_STATUSES = ("created", "processing", "pending", "authorised", "succeeded", "failed", "needs_review")
CAPTURE_MODES = ("automatic", "manual")
UNFINISHED_PAYMENT = "status IN ('created', 'processing', 'pending')"

payments = sa.Table(
    "payments",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("merchant_account", sa.Text(), nullable=False),
    sa.Column("merchant_reference", sa.Text(), nullable=False),
    sa.Column("amount", sa.BigInteger(), nullable=False),
    sa.Column("currency", sa.Text(), nullable=False),
    sa.Column("psp", sa.Text(), nullable=False),
    sa.Column("psp_reference", sa.Text(), nullable=True),
    sa.Column("idempotency_key", sa.Text(), nullable=False),
    sa.Column("status", sa.Text(), nullable=False),
    sa.Column("failure_reason", sa.Text(), nullable=True),
    sa.Column("review_reason", sa.Text(), nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("payment_method", sa.Text(), nullable=True),
    sa.Column("customer_reference", sa.Text(), nullable=True),
    sa.Column("key_generation", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("key_sent_at", Timestamp, nullable=True),
    sa.Column("review_since", Timestamp, nullable=True),  #: when it last entered needs_review (migration 0008)
    sa.Column("review_assignee", sa.Text(), nullable=True),  #: who works on it in review (migration 0020)
    #: what the PSP captured (the whole amount once succeeded) and what our non-failed refunds take back
    #: (migration 0018): one conditional UPDATE moves ``refunded_amount`` with each refund (recon.db.refund_store)
    sa.Column("captured_amount", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("refunded_amount", sa.BigInteger(), nullable=False, server_default="0"),
    #: automatic or manual capture, when it was authorised, and what its captures and cancels not failed claim of
    #: the authorisation (migration 0021; recon.db.modification_store keeps the bound)
    sa.Column("capture_mode", sa.Text(), nullable=False, server_default="automatic"),
    sa.Column("authorised_at", Timestamp, nullable=True),
    sa.Column("authorisation_claimed", sa.BigInteger(), nullable=False, server_default="0"),
    sa.CheckConstraint("amount > 0", name="payments_amount_positive"),
    sa.CheckConstraint(_in("capture_mode", CAPTURE_MODES), name="payments_capture_mode_valid"),
    sa.CheckConstraint("authorisation_claimed >= 0 AND authorisation_claimed <= amount",
                       name="payments_claims_within_authorisation"),
    sa.CheckConstraint("refunded_amount >= 0 AND refunded_amount <= captured_amount AND captured_amount <= amount",
                       name="payments_refunds_within_capture"),
    sa.CheckConstraint("length(currency) = 3 AND upper(currency) = currency", name="payments_currency_iso"),
    sa.CheckConstraint(_in("status", PAYMENT_STATUSES), name="payments_status_valid"),
    sa.UniqueConstraint("merchant_reference", name="payments_merchant_reference_key"),
    sa.UniqueConstraint("idempotency_key", name="payments_idempotency_key_key"),
    sa.Index("payments_stale", "psp", "updated_at", postgresql_where=sa.text(UNFINISHED_PAYMENT),
             sqlite_where=sa.text(UNFINISHED_PAYMENT)),
    sa.Index("payments_psp_created", "psp", "created_at"),
    sa.Index("payments_psp_reference", "psp", "psp_reference"),
    #: (0008; since 0027 INCLUDE psp, merchant_reference) money at risk, and the payments list's unfinished totals
    sa.Index("payments_at_risk", "currency", "created_at", "amount", postgresql_include=["psp", "merchant_reference"],
             postgresql_where=sa.text(UNFINISHED_PAYMENT), sqlite_where=sa.text(UNFINISHED_PAYMENT)),
    #: (0027) every column the payments list filters on but the reference: its totals read this index alone
    sa.Index("payments_list_facets", "created_at", "currency", "amount", postgresql_include=["status", "psp"]),
    sa.Index("payments_review", "review_since", "id", postgresql_where=sa.text("status = 'needs_review'"),
             sqlite_where=sa.text("status = 'needs_review'")),
    sa.Index("payments_review_assignee", "review_assignee", "review_since", "id",
             postgresql_where=sa.text("status = 'needs_review'"), sqlite_where=sa.text("status = 'needs_review'")),
    #: (migration 0024, replacing 0020's payments_review_totals) every column the queue's filters read: each
    #: filter's totals are an Index Only Scan of the items in review on PostgreSQL
    sa.Index("payments_review_facets", "currency", "amount", "review_since",
             postgresql_include=["psp", "review_assignee", "review_reason"],
             postgresql_where=sa.text("status = 'needs_review'"), sqlite_where=sa.text("status = 'needs_review'")),
    sa.Index("payments_authorised", "psp", "authorised_at", "id", postgresql_where=sa.text("status = 'authorised'"),
             sqlite_where=sa.text("status = 'authorised'")),
)
#: (migration 0024, PostgreSQL only) the console's case-insensitive reference prefix
sa.Index("payments_reference_lower", sa.func.lower(payments.c.merchant_reference).label("reference_lower"),
         postgresql_ops={"reference_lower": "text_pattern_ops"}).ddl_if(dialect="postgresql")

# --- the review queue's comments and assignments (migration 0020) -------------------------------------------

REVIEW_COMMENT_KINDS = ("comment", "assigned")

review_comments = sa.Table(
    "review_comments",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("payment_id", Id, sa.ForeignKey("payments.id", name="review_comments_payment_fkey"), nullable=False),
    sa.Column("at", Timestamp, nullable=False),
    sa.Column("author", sa.Text(), nullable=False),
    sa.Column("kind", sa.Text(), nullable=False),
    sa.Column("body", sa.Text(), nullable=False),
    sa.CheckConstraint(_in("kind", REVIEW_COMMENT_KINDS), name="review_comments_kind_valid"),
    sa.Index("review_comments_payment", "payment_id", "id"),
    sqlite_autoincrement=True,
)

payment_events = sa.Table(
    "payment_events",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("payment_id", Id, sa.ForeignKey("payments.id"), nullable=False),
    sa.Column("from_status", sa.Text(), nullable=True),
    sa.Column("to_status", sa.Text(), nullable=False),
    sa.Column("source", sa.Text(), nullable=False),
    sa.Column("job_id", Id, nullable=True),
    sa.Column("attempt", sa.Integer(), nullable=True),
    sa.Column("details", Json, nullable=True),
    sa.Column("at", Timestamp, nullable=False),
    sa.CheckConstraint("source IN ('charge', 'reconcile', 'manual', 'webhook')", name="payment_events_source_valid"),
    sa.Index("payment_events_payment", "payment_id", "id"),
    sa.Index("payment_events_resolutions", "at",
             postgresql_where=sa.text("source = 'manual' AND from_status = 'needs_review'"),
             sqlite_where=sa.text("source = 'manual' AND from_status = 'needs_review'")),
)

# --- sweep runs (migration 0008): one row per `recon sweep`, for `recon stats` and the console ---------------

SWEEP_OUTCOMES = ("running", "finished", "failed")

sweep_runs = sa.Table(
    "sweep_runs",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("operator", sa.Text(), nullable=False),
    sa.Column("options", Json, nullable=False),
    sa.Column("outcome", sa.Text(), nullable=False),
    sa.Column("exit_code", sa.Integer(), nullable=True),
    sa.Column("summary", Json, nullable=True),
    sa.CheckConstraint(_in("outcome", SWEEP_OUTCOMES), name="sweep_runs_outcome_valid"),
    sa.Index("sweep_runs_started", "started_at"),
    sqlite_autoincrement=True,
)

# --- workers (migration 0003): one row per worker process, for metrics and `recon stats` --------------------

workers = sa.Table(
    "workers",
    metadata,
    sa.Column("id", sa.Text(), primary_key=True),  #: the lease owner id: host:pid:random
    sa.Column("host", sa.Text(), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=False),
    sa.Column("queues", Json, nullable=False),  #: a JSON array of queue names
    sa.Column("slots", sa.Integer(), nullable=False),
    sa.Column("busy_slots", sa.Integer(), nullable=False),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("last_seen_at", Timestamp, nullable=False),
    sa.Column("stopped_at", Timestamp, nullable=True),  #: set by a clean shutdown
    sa.Column("counters", Json, nullable=False),  #: cumulative since the process started (recon.counters)
    #: listening for wake-ups, its last claim drained its queues: an enqueue NOTIFYs only then (migration 0025)
    sa.Column("waiting", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.CheckConstraint("slots >= 0 AND busy_slots >= 0", name="workers_slots_valid"),
    sa.Index("workers_last_seen", "last_seen_at"),
    sa.Index("workers_waiting", "id", postgresql_where=sa.text("waiting"), sqlite_where=sa.text("waiting")),
)

# --- psp controls (migration 0004): pause switch, 429 cool-down, circuit breaker, rate-limit bucket ---------

BREAKER_STATES = ("closed", "open", "half_open")

psp_controls = sa.Table(
    "psp_controls",
    metadata,
    sa.Column("psp", sa.Text(), primary_key=True),
    sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("paused_by", sa.Text(), nullable=True),
    sa.Column("paused_at", Timestamp, nullable=True),
    sa.Column("pause_reason", sa.Text(), nullable=True),
    #: (migration 0024) who resumed the PSP last, and when; the last pause's columns are kept after a resume
    sa.Column("resumed_by", sa.Text(), nullable=True),
    sa.Column("resumed_at", Timestamp, nullable=True),
    sa.Column("cooldown_until", Timestamp, nullable=True),  #: every worker backs off until then (a 429)
    sa.Column("breaker_state", sa.Text(), nullable=False, server_default="closed"),
    sa.Column("failures", sa.Integer(), nullable=False, server_default="0"),  #: consecutive, PSP-wide
    sa.Column("opened_at", Timestamp, nullable=True),
    sa.Column("probe_at", Timestamp, nullable=True),  #: open: next probe; half_open: the probe's expiry (token)
    sa.Column("breaker_reason", sa.Text(), nullable=True),
    sa.Column("tokens", sa.Float(), nullable=False, server_default="0"),  #: the rate-limit bucket ...
    sa.Column("tokens_at", Timestamp, nullable=True),  #: ... as of this time
    sa.Column("last_grant", sa.Integer(), nullable=False, server_default="0"),  #: tokens the last admission took
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.CheckConstraint(_in("breaker_state", BREAKER_STATES), name="psp_controls_breaker_valid"),
    sa.CheckConstraint("failures >= 0", name="psp_controls_failures_valid"),
)

# --- webhook events (migration 0009): every event a PSP pushed, once -----------------------------------------

WEBHOOK_STATES = ("received", "applied", "unknown_payment", "stale", "ignored")

webhook_events = sa.Table(
    "webhook_events",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("psp", sa.Text(), nullable=False),
    sa.Column("event_id", sa.Text(), nullable=False),
    sa.Column("event_type", sa.Text(), nullable=False),
    sa.Column("occurred_at", Timestamp, nullable=True),
    sa.Column("received_at", Timestamp, nullable=False),
    sa.Column("psp_reference", sa.Text(), nullable=True),
    sa.Column("merchant_reference", sa.Text(), nullable=True),
    sa.Column("merchant_account", sa.Text(), nullable=True),
    sa.Column("amount", sa.BigInteger(), nullable=True),
    sa.Column("currency", sa.Text(), nullable=True),
    sa.Column("news", sa.Text(), nullable=True),
    sa.Column("psp_status", sa.Text(), nullable=True),
    sa.Column("reason", sa.Text(), nullable=True),
    sa.Column("report", sa.Text(), nullable=True),
    sa.Column("body", Json, nullable=True),
    sa.Column("state", sa.Text(), nullable=False, server_default="received"),
    sa.Column("payment_id", Id, nullable=True),
    sa.Column("applied_at", Timestamp, nullable=True),
    #: the PSP's id of the movement the event is about, when not the payment itself: a refund's (migration 0018)
    sa.Column("movement_reference", sa.Text(), nullable=True),
    #: a dispute's evidence deadline and the PSP's dispute fee (minor units), when the event says (migration 0018)
    sa.Column("due_by", Timestamp, nullable=True),
    sa.Column("fee", sa.BigInteger(), nullable=True),
    sa.CheckConstraint(_in("state", WEBHOOK_STATES), name="webhook_events_state_valid"),
    sa.UniqueConstraint("psp", "event_id", name="webhook_events_psp_event_key"),
    sa.Index("webhook_events_unknown", "psp", "received_at", postgresql_where=sa.text("state = 'unknown_payment'"),
             sqlite_where=sa.text("state = 'unknown_payment'")),
    sqlite_autoincrement=True,
)

# --- schedule slots (migration 0010): each slot of each [schedule.NAME] claimed once --------------------------

schedule_slots = sa.Table(
    "schedule_slots",
    metadata,
    sa.Column("schedule", sa.Text(), primary_key=True),
    sa.Column("slot_at", Timestamp, primary_key=True),
    sa.Column("enqueued_at", Timestamp, nullable=False),
    sa.Column("job_id", Id, nullable=True),
    sa.Column("scheduler", sa.Text(), nullable=False),
)

# --- console_sessions (migration 0013): the console's logins, ended by logout or the server's timeouts -------

console_sessions = sa.Table(
    "console_sessions",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("sid_hash", sa.LargeBinary(), nullable=False),  #: SHA-256 of the cookie's session id, never the id
    sa.Column("principal", sa.Text(), nullable=False),  #: who: "access-token/<fingerprint>", the token's holder
    sa.Column("operator_id", Id, nullable=True),  #: a named operator (issue 27); NULL until they exist
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("last_seen_at", Timestamp, nullable=False),  #: written at most once a minute (recon.console.session)
    sa.Column("expires_at", Timestamp, nullable=False),  #: the absolute deadline: created_at + absolute_timeout
    sa.Column("revoked_at", Timestamp, nullable=True),  #: logout, or a newer login from the same browser
    sa.CheckConstraint("expires_at > created_at AND last_seen_at >= created_at", name="console_sessions_times_valid"),
    sa.UniqueConstraint("sid_hash", name="console_sessions_sid_hash_key"),
    sqlite_autoincrement=True,
)

# --- bank statements (migration 0016): the bank's statements and their entries, each stored once ------------

Day = sa.Date().with_variant(sa.Text(), "sqlite")
BANK_DIRECTIONS = ("credit", "debit")

bank_statements = sa.Table(
    "bank_statements",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("account", sa.Text(), nullable=False),
    sa.Column("statement_ref", sa.Text(), nullable=False),
    sa.Column("sequence", sa.Text(), nullable=False),
    sa.Column("currency", sa.Text(), nullable=False),
    sa.Column("opening_balance", sa.BigInteger(), nullable=False),
    sa.Column("closing_balance", sa.BigInteger(), nullable=False),
    sa.Column("period_start", Day, nullable=False),
    sa.Column("period_end", Day, nullable=False),
    sa.Column("entry_count", sa.Integer(), nullable=False),
    sa.Column("format", sa.Text(), nullable=False),
    sa.Column("file_name", sa.Text(), nullable=False),
    sa.Column("file_digest", sa.Text(), nullable=False),
    sa.Column("imported_at", Timestamp, nullable=False),
    sa.UniqueConstraint("account", "statement_ref", "sequence", "period_start", "period_end",
                        name="bank_statements_identity_key"),
    sqlite_autoincrement=True,
)

bank_entries = sa.Table(
    "bank_entries",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("account", sa.Text(), nullable=False),
    sa.Column("entry_key", sa.Text(), nullable=False),
    sa.Column("statement_id", Id, sa.ForeignKey("bank_statements.id", name="bank_entries_statement_fkey"),
              nullable=False),
    sa.Column("booking_date", Day, nullable=False),
    sa.Column("value_date", Day, nullable=True),
    sa.Column("amount", sa.BigInteger(), nullable=False),
    sa.Column("direction", sa.Text(), nullable=False),
    sa.Column("currency", sa.Text(), nullable=False),
    sa.Column("bank_reference", sa.Text(), nullable=True),
    sa.Column("end_to_end_id", sa.Text(), nullable=True),
    sa.Column("counterparty", sa.Text(), nullable=True),
    sa.Column("remittance", sa.Text(), nullable=True),
    sa.Column("bank_code", sa.Text(), nullable=True),
    #: the payout matching's link: the (first) payout this credit explains (all of them: payout_matches)
    sa.Column("payout_id", Id, sa.ForeignKey("payouts.id", name="bank_entries_payout_fkey"), nullable=True),
    sa.Column("imported_at", Timestamp, nullable=False),
    sa.CheckConstraint("amount >= 0", name="bank_entries_amount_not_negative"),
    sa.CheckConstraint(_in("direction", BANK_DIRECTIONS), name="bank_entries_direction_valid"),
    sa.UniqueConstraint("account", "entry_key", name="bank_entries_account_key"),
    sa.Index("bank_entries_booking", "account", "booking_date"),
    sa.Index("bank_entries_bank_reference", "bank_reference"),
    sa.Index("bank_entries_end_to_end", "end_to_end_id"),
    sa.Index("bank_entries_statement", "statement_id"),
    sa.Index("bank_entries_unmatched", "currency", "booking_date",
             postgresql_where=sa.text("payout_id IS NULL AND direction = 'credit'"),
             sqlite_where=sa.text("payout_id IS NULL AND direction = 'credit'")),
    sqlite_autoincrement=True,
)


# --- payouts (migration 0017): the PSPs' payouts, their lines, and the close's matches and exceptions --------

PAYOUT_STATUSES = ("pending", "in_transit", "paid", "failed", "canceled")
PAYOUT_LINE_KINDS = ("charge", "refund", "dispute", "dispute_reversal", "fee", "adjustment", "payout", "other")
PAYOUT_EXCEPTION_KINDS = ("bank_missing", "amount_differs", "ambiguous", "unexplained_credit", "lines_differ",
                          "payout_failed", "dispute_fee_differs")  # dispute_fee_differs: migration 0029
PAYOUT_EXCEPTION_STATES = ("open", "resolved", "cleared")

payouts = sa.Table(
    "payouts",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("psp", sa.Text(), nullable=False),
    sa.Column("merchant_account", sa.Text(), nullable=False),
    sa.Column("payout_ref", sa.Text(), nullable=False),
    sa.Column("amount", sa.BigInteger(), nullable=False),
    sa.Column("currency", sa.Text(), nullable=False),
    sa.Column("status", sa.Text(), nullable=False),
    sa.Column("arrival_date", Day, nullable=False),
    sa.Column("trace_ref", sa.Text(), nullable=True),
    sa.Column("statement_descriptor", sa.Text(), nullable=True),
    sa.Column("digest", sa.Text(), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("line_count", sa.Integer(), nullable=False),
    sa.Column("lines_net", sa.BigInteger(), nullable=False),
    sa.Column("fetched_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.CheckConstraint(_in("status", PAYOUT_STATUSES), name="payouts_status_valid"),
    sa.CheckConstraint("length(currency) = 3 AND upper(currency) = currency", name="payouts_currency_iso"),
    sa.UniqueConstraint("psp", "payout_ref", name="payouts_psp_ref_key"),
    sa.Index("payouts_arrival", "psp", "arrival_date"),
    sqlite_autoincrement=True,
)

payout_lines = sa.Table(
    "payout_lines",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("payout_id", Id, sa.ForeignKey("payouts.id", name="payout_lines_payout_fkey"), nullable=False),
    sa.Column("line_ref", sa.Text(), nullable=False),
    sa.Column("kind", sa.Text(), nullable=False),
    sa.Column("psp_reference", sa.Text(), nullable=True),
    sa.Column("merchant_reference", sa.Text(), nullable=True),
    sa.Column("gross", sa.BigInteger(), nullable=False),
    sa.Column("fee", sa.BigInteger(), nullable=False),
    sa.Column("net", sa.BigInteger(), nullable=False),
    sa.Column("currency", sa.Text(), nullable=False),
    sa.Column("payment_id", Id, sa.ForeignKey("payments.id", name="payout_lines_payment_fkey"), nullable=True),
    sa.Column("missing_locally", sa.Boolean(), nullable=False),
    #: the PSP's id of the refund or dispute a line carries, and ours when we know it (migration 0022)
    sa.Column("movement_reference", sa.Text(), nullable=True),
    sa.Column("refund_id", Id, sa.ForeignKey("refunds.id", name="payout_lines_refund_fkey"), nullable=True),
    sa.Column("dispute_id", Id, sa.ForeignKey("disputes.id", name="payout_lines_dispute_fkey"), nullable=True),
    sa.CheckConstraint(_in("kind", PAYOUT_LINE_KINDS), name="payout_lines_kind_valid"),
    sa.UniqueConstraint("payout_id", "line_ref", name="payout_lines_ref_key"),
    sa.Index("payout_lines_payment", "payment_id"),
    sqlite_autoincrement=True,
)

payout_events = sa.Table(
    "payout_events",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("payout_id", Id, sa.ForeignKey("payouts.id", name="payout_events_payout_fkey"), nullable=False),
    sa.Column("at", Timestamp, nullable=False),
    sa.Column("kind", sa.Text(), nullable=False),
    sa.Column("detail", sa.Text(), nullable=False),
    sa.Index("payout_events_payout", "payout_id", "id"),
    sqlite_autoincrement=True,
)

payout_matches = sa.Table(
    "payout_matches",
    metadata,
    sa.Column("payout_id", Id, sa.ForeignKey("payouts.id", name="payout_matches_payout_fkey"), nullable=False),
    sa.Column("bank_entry_id", Id, sa.ForeignKey("bank_entries.id", name="payout_matches_entry_fkey"),
              nullable=False),
    sa.Column("rule", sa.Text(), nullable=False),
    sa.Column("bank_fee", sa.BigInteger(), nullable=False),
    sa.Column("matched_at", Timestamp, nullable=False),
    sa.PrimaryKeyConstraint("payout_id", "bank_entry_id", name="payout_matches_pkey"),
    sa.Index("payout_matches_entry", "bank_entry_id"),
)

payout_exceptions = sa.Table(
    "payout_exceptions",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("exception_key", sa.Text(), nullable=False),
    sa.Column("kind", sa.Text(), nullable=False),
    sa.Column("payout_id", Id, sa.ForeignKey("payouts.id", name="payout_exceptions_payout_fkey"), nullable=True),
    sa.Column("bank_entry_id", Id, sa.ForeignKey("bank_entries.id", name="payout_exceptions_entry_fkey"),
              nullable=True),
    sa.Column("detail", sa.Text(), nullable=False),
    sa.Column("state", sa.Text(), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("resolved_by", sa.Text(), nullable=True),
    sa.Column("resolution", sa.Text(), nullable=True),
    sa.Column("resolved_at", Timestamp, nullable=True),
    sa.CheckConstraint(_in("kind", PAYOUT_EXCEPTION_KINDS), name="payout_exceptions_kind_valid"),
    sa.CheckConstraint(_in("state", PAYOUT_EXCEPTION_STATES), name="payout_exceptions_state_valid"),
    sa.Index("payout_exceptions_open_key", "exception_key", unique=True, postgresql_where=sa.text("state = 'open'"),
             sqlite_where=sa.text("state = 'open'")),
    sa.Index("payout_exceptions_payout", "payout_id"),
    sa.Index("payout_exceptions_entry", "bank_entry_id"),
    sqlite_autoincrement=True,
)

# the closes that ran (migration 0023): each PSP's last close for recon stats and the metrics
close_runs = sa.Table(
    "close_runs",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("psp", sa.Text(), nullable=False),
    sa.Column("since", Day, nullable=False),
    sa.Column("until", Day, nullable=False),
    sa.Column("ran_at", Timestamp, nullable=False),
    sa.Column("payouts", sa.Integer(), nullable=False),
    sa.Column("open_items", sa.Integer(), nullable=False),
    sa.Column("closed", sa.Boolean(), nullable=False),
    sa.Index("close_runs_psp", "psp", "id"),
    sqlite_autoincrement=True,
)

# --- refunds (migration 0018): money given back, each refund a job of its own, never more than captured -------

REFUND_STATUSES = ("created", "processing", "pending", "succeeded", "failed", "needs_review")
UNFINISHED_REFUND = UNFINISHED_PAYMENT
REFUND_EVENT_SOURCES = ("refund", "reconcile", "manual", "webhook")

refunds = sa.Table(
    "refunds",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("payment_id", Id, sa.ForeignKey("payments.id", name="refunds_payment_fkey"), nullable=False),
    sa.Column("refund_reference", sa.Text(), nullable=False),  #: ours, unique: the CSV's or the command's
    sa.Column("amount", sa.BigInteger(), nullable=False),  #: minor units of the payment's currency
    sa.Column("currency", sa.Text(), nullable=False),
    sa.Column("reason", sa.Text(), nullable=True),  #: the PSP's reason code
    sa.Column("psp", sa.Text(), nullable=False),
    sa.Column("status", sa.Text(), nullable=False),
    sa.Column("psp_refund_id", sa.Text(), nullable=True),  #: the PSP's id of the refund, stored once, never replaced
    sa.Column("idempotency_key", sa.Text(), nullable=False),
    sa.Column("requested_by", sa.Text(), nullable=False),
    sa.Column("failure_reason", sa.Text(), nullable=True),
    sa.Column("review_reason", sa.Text(), nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("sent_at", Timestamp, nullable=True),  #: when the request first went out
    sa.CheckConstraint("amount > 0", name="refunds_amount_positive"),
    sa.CheckConstraint(_in("status", REFUND_STATUSES), name="refunds_status_valid"),
    sa.UniqueConstraint("refund_reference", name="refunds_refund_reference_key"),
    sa.UniqueConstraint("idempotency_key", name="refunds_idempotency_key_key"),
    sa.Index("refunds_payment", "payment_id", "id"),
    sa.Index("refunds_psp_refund_id", "psp", "psp_refund_id"),
    sa.Index("refunds_stale", "psp", "updated_at", postgresql_where=sa.text(UNFINISHED_REFUND),
             sqlite_where=sa.text(UNFINISHED_REFUND)),
    sqlite_autoincrement=True,
)

refund_events = sa.Table(
    "refund_events",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("refund_id", Id, sa.ForeignKey("refunds.id", name="refund_events_refund_fkey"), nullable=False),
    sa.Column("from_status", sa.Text(), nullable=True),
    sa.Column("to_status", sa.Text(), nullable=False),
    sa.Column("source", sa.Text(), nullable=False),
    sa.Column("job_id", Id, nullable=True),
    sa.Column("attempt", sa.Integer(), nullable=True),
    sa.Column("details", Json, nullable=True),
    sa.Column("at", Timestamp, nullable=False),
    sa.CheckConstraint(_in("source", REFUND_EVENT_SOURCES), name="refund_events_source_valid"),
    sa.Index("refund_events_refund", "refund_id", "id"),
    sqlite_autoincrement=True,
)

# --- disputes (migration 0018): a payment's chargebacks, objects of their own, from the PSPs' webhooks ----------

DISPUTE_STATUSES = ("opened", "won", "lost", "reversed")

disputes = sa.Table(
    "disputes",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("payment_id", Id, sa.ForeignKey("payments.id", name="disputes_payment_fkey"), nullable=False),
    sa.Column("psp", sa.Text(), nullable=False),
    sa.Column("psp_dispute_id", sa.Text(), nullable=False),  #: the PSP's id (Adyen: the payment's reference)
    sa.Column("status", sa.Text(), nullable=False),
    sa.Column("amount", sa.BigInteger(), nullable=True),  #: withdrawn, minor units of ``currency``
    sa.Column("currency", sa.Text(), nullable=True),
    sa.Column("fee", sa.BigInteger(), nullable=True),  #: the PSP's dispute fee, when it says
    sa.Column("reason", sa.Text(), nullable=True),
    sa.Column("psp_status", sa.Text(), nullable=True),  #: the PSP's own word for its latest state
    sa.Column("evidence_due_by", Timestamp, nullable=True),
    sa.Column("opened_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.CheckConstraint(_in("status", DISPUTE_STATUSES), name="disputes_status_valid"),
    sa.UniqueConstraint("psp", "psp_dispute_id", name="disputes_psp_dispute_key"),
    sa.Index("disputes_payment", "payment_id", "id"),
    sa.Index("disputes_open_due", "evidence_due_by", postgresql_where=sa.text("status = 'opened'"),
             sqlite_where=sa.text("status = 'opened'")),
    sqlite_autoincrement=True,
)

dispute_events = sa.Table(
    "dispute_events",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("dispute_id", Id, sa.ForeignKey("disputes.id", name="dispute_events_dispute_fkey"), nullable=False),
    sa.Column("from_status", sa.Text(), nullable=True),
    sa.Column("to_status", sa.Text(), nullable=False),
    sa.Column("source", sa.Text(), nullable=False),
    sa.Column("job_id", Id, nullable=True),
    sa.Column("attempt", sa.Integer(), nullable=True),
    sa.Column("details", Json, nullable=True),
    sa.Column("at", Timestamp, nullable=False),
    sa.CheckConstraint("source IN ('webhook', 'manual', 'listing')", name="dispute_events_source_valid"),  # 0022
    sa.Index("dispute_events_dispute", "dispute_id", "id"),
    sqlite_autoincrement=True,
)

# --- the dispute listings' cursor (migration 0028): each PSP's listing read up to ``read_until`` ----------------

dispute_reads = sa.Table(
    "dispute_reads",
    metadata,
    sa.Column("psp", sa.Text(), primary_key=True),
    sa.Column("read_until", Timestamp, nullable=False),
    sa.Column("read_at", Timestamp, nullable=False),
)

# --- operators, the audit trail and four-eyes approvals (migration 0019, issue 27) ---------------------------

ROLES = ("viewer", "operator", "approver", "admin")
APPROVAL_STATES = ("pending", "approved", "rejected", "expired", "failed")

operators = sa.Table(
    "operators",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("name", sa.Text(), nullable=False),
    sa.Column("role", sa.Text(), nullable=False),
    sa.Column("password_hash", sa.Text(), nullable=True),  #: argon2id (recon.operators); NULL: the token operator
    #: sealed by recon.totp_key (v1.<key id>.<nonce>.<ciphertext>), or plain base32 written before sealing
    sa.Column("totp_secret", sa.Text(), nullable=True),
    #: (migration 0024) the RFC 6238 time step of the last accepted code: that step and earlier ones are refused
    sa.Column("totp_last_step", sa.BigInteger(), nullable=True),
    sa.Column("disabled_at", Timestamp, nullable=True),
    sa.Column("failed_logins", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("locked_until", Timestamp, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.CheckConstraint(_in("role", ROLES), name="operators_role_valid"),
    sa.UniqueConstraint("name", name="operators_name_key"),
    sqlite_autoincrement=True,
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("at", Timestamp, nullable=False),
    sa.Column("actor", sa.Text(), nullable=False),  #: an operator's name, or "system:<what>"
    sa.Column("action", sa.Text(), nullable=False),  #: e.g. review.resolve, operator.add, login.failed
    sa.Column("subject", sa.Text(), nullable=False),  #: what it was done to (a payment reference, a PSP, ...)
    sa.Column("outcome", sa.Text(), nullable=False),  #: done, refused, requested, approved, ...
    sa.Column("evidence", Json, nullable=True),
    sa.Index("audit_log_at", "at"),
    sqlite_autoincrement=True,
)

audit_seals = sa.Table(
    "audit_seals",
    metadata,
    sa.Column("stream", sa.Text(), primary_key=True),  #: 'audit' (audit_log) or 'payment_events'
    sa.Column("row_id", Id, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.Text(), nullable=False),  #: 'row', or 'gap': an id that never committed
    sa.Column("row_hash", sa.Text(), nullable=False),  #: SHA-256 (hex) of the row's canonical encoding
    sa.Column("chain_hash", sa.Text(), nullable=False),  #: SHA-256 (hex) over the previous chain_hash + row_hash
    sa.Column("sealed_at", Timestamp, nullable=False),
    sa.CheckConstraint("stream IN ('audit', 'payment_events')", name="audit_seals_stream_valid"),
    sa.CheckConstraint("kind IN ('row', 'gap')", name="audit_seals_kind_valid"),
)

approvals = sa.Table(
    "approvals",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("action", sa.Text(), nullable=False),  #: review.resolve, review.bulk_resolve, jobs.replay, psp.pause
    sa.Column("subject", sa.Text(), nullable=False),
    sa.Column("payload", Json, nullable=False),  #: what runs when approved
    sa.Column("state", sa.Text(), nullable=False),
    sa.Column("requested_by", sa.Text(), nullable=False),
    sa.Column("requested_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
    sa.Column("decided_by", sa.Text(), nullable=True),
    sa.Column("decided_at", Timestamp, nullable=True),
    sa.Column("result", sa.Text(), nullable=True),  #: what the approved action did, or why it failed
    sa.CheckConstraint(_in("state", APPROVAL_STATES), name="approvals_state_valid"),
    sa.CheckConstraint("decided_by IS NULL OR decided_by <> requested_by", name="approvals_four_eyes"),
    sa.Index("approvals_pending", "state", "id"),
    sqlite_autoincrement=True,
)


# --- captures and cancels (migration 0021): a manual payment's modifications, each a job of its own ------------

MODIFICATION_KINDS = ("capture", "cancel")
MODIFICATION_STATUSES = REFUND_STATUSES
MODIFICATION_EVENT_SOURCES = ("modification", "reconcile", "manual", "webhook")

modifications = sa.Table(
    "modifications",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("payment_id", Id, sa.ForeignKey("payments.id", name="modifications_payment_fkey"), nullable=False),
    sa.Column("kind", sa.Text(), nullable=False),  #: capture or cancel
    sa.Column("modification_reference", sa.Text(), nullable=False),  #: ours, unique
    sa.Column("amount", sa.BigInteger(), nullable=False),  #: captured, or released by a cancel; minor units
    sa.Column("currency", sa.Text(), nullable=False),
    sa.Column("psp", sa.Text(), nullable=False),
    sa.Column("status", sa.Text(), nullable=False),
    sa.Column("psp_modification_id", sa.Text(), nullable=True),  #: the PSP's id, stored once, never replaced
    sa.Column("idempotency_key", sa.Text(), nullable=False),
    sa.Column("requested_by", sa.Text(), nullable=False),
    sa.Column("failure_reason", sa.Text(), nullable=True),
    sa.Column("review_reason", sa.Text(), nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("sent_at", Timestamp, nullable=True),
    sa.CheckConstraint("amount > 0", name="modifications_amount_positive"),
    sa.CheckConstraint(_in("kind", MODIFICATION_KINDS), name="modifications_kind_valid"),
    sa.CheckConstraint(_in("status", MODIFICATION_STATUSES), name="modifications_status_valid"),
    sa.UniqueConstraint("modification_reference", name="modifications_reference_key"),
    sa.UniqueConstraint("idempotency_key", name="modifications_idempotency_key_key"),
    sa.Index("modifications_payment", "payment_id", "id"),
    sa.Index("modifications_psp_id", "psp", "psp_modification_id"),
    sa.Index("modifications_stale", "psp", "updated_at", postgresql_where=sa.text(UNFINISHED_REFUND),
             sqlite_where=sa.text(UNFINISHED_REFUND)),
    sqlite_autoincrement=True,
)

modification_events = sa.Table(
    "modification_events",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("modification_id", Id, sa.ForeignKey("modifications.id", name="modification_events_fkey"),
              nullable=False),
    sa.Column("from_status", sa.Text(), nullable=True),
    sa.Column("to_status", sa.Text(), nullable=False),
    sa.Column("source", sa.Text(), nullable=False),
    sa.Column("job_id", Id, nullable=True),
    sa.Column("attempt", sa.Integer(), nullable=True),
    sa.Column("details", Json, nullable=True),
    sa.Column("at", Timestamp, nullable=False),
    sa.CheckConstraint(_in("source", MODIFICATION_EVENT_SOURCES), name="modification_events_source_valid"),
    sa.Index("modification_events_modification", "modification_id", "id"),
    sqlite_autoincrement=True,
)
