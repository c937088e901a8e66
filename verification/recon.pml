/*
 * recon's lease protocol and the payment writes it fences, as the code implements them.
 *
 * NW workers and the stuck watcher share one payment, its charge job (CH) and its reconcile job (RC).
 * Every variable and step below has a counterpart in recon/db/*_queries.py, recon/db/*_store.py,
 * recon/engine/*.py, recon/payments/charge.py or recon/reconcile/handler.py: docs/verification.md maps
 * them one by one. A change to that SQL or to those handlers comes with a change here.
 *
 * One atomic block is one database transaction (SQLite's BEGIN IMMEDIATE serialises them all; on
 * PostgreSQL each of these transactions is either one statement or holds the row locks that make it
 * equivalent), except the reconcile "never reached the PSP" heal, whose transaction reads the charge job
 * in a second statement after its compare-and-set: on PostgreSQL (READ COMMITTED) that read takes a new
 * snapshot, so it is split into three steps unless SQLITE is defined.
 *
 * Time: a logical clock kept relative to each lease (jl: LIVE while lease_until > now, 0 once
 * lease_until < now), so the clock itself needs no bound: a tick moves now past one lease's lease_until,
 * and a job's claims are bounded instead (ABOUND_CH, ABOUND_RC). The PSP's idempotency retention (hours,
 * where a lease lasts seconds) is a separate, bounded event: RETAIN in Environment.
 * A pause is any stretch in which a worker takes no step while the clock, the watcher and the other
 * workers run; it resumes with the job, attempt and payment it read before (its locals: a stale view).
 * A crash is a worker process that stops for ever while holding a lease (MAXCRASH of them).
 * Trails print the story: every line a step prints starts with "| " (statuses and answers are the
 * numbers defined below).
 *
 * Compile-time switches (spin -DNAME):
 *   UNFENCED          the chaos suite's planted bug: a finish is guarded by the job id only
 *   SQLITE            every transaction serialised (no READ COMMITTED split of the heal)
 *   PAUSE_OUTLIVES_RETENTION
 *                     drop the timing assumption of property 4 (see RETAIN below)
 *   SEND_UNDER_LEASE  a worker's PSP request lands only while its lease is still held (no stale send)
 *   FIX_MARK_PROCESSING
 *                     _mark_processing honours its compare-and-set (not what the code does today)
 *   FIX_HEAL_AFTER_LAST_SEND
 *                     "never reached the PSP" waits a grace period after the last send's stamp, and no pause
 *                     outlasts it: no heal while a stamped request has not landed (finding 2's fix)
 *   REPLAY            add `recon jobs replay` and a charge that dies first (config_dead); with ABOUND_CH=2
 *   ASSERTS_OFF       no assertions: the ltl formulas alone must find a counterexample
 *   REFUNDS           the refund model instead of the charge model (the end of this file): two refunds of one
 *                     succeeded payment, their refund jobs on RW workers, the bound on the captured amount, the
 *                     refund reconcile job and the stuck watcher
 *   REFUND_UNBOUNDED  (with REFUNDS) the mutation: a refund reserved without the conditional UPDATE's bound
 *   REFUND_PAUSE_OUTLIVES_GRACE
 *                     (with REFUNDS) drop the grace-period assumption of "never reached the PSP"
 *   CAPTURES          the capture model instead of the charge model (after the refund model): a capture of a
 *                     manual-capture payment's whole authorisation and a cancel of it, their jobs on MW workers with
 *                     a crash, the watcher, the PSP's later word and reconciliation, and a refund of the capture
 *   TWO_CAPTURES      (with CAPTURES) two captures (1 unit, and all 2) instead of the capture and the cancel
 *   ALL_THREE         (with CAPTURES) both captures and the cancel: about 2 million states, outside CI
 *   MOD_UNBOUNDED     (with CAPTURES) the mutation: a capture claimed without payment_claim_capture's bound
 *   MOD_NOT_ONE_LIVE  (with CAPTURES) the mutation: a cancel claimed while a capture is live
 *   MOD_NO_SET_CAPTURED
 *                     (with CAPTURES) the mutation: a capture's success without payment_set_captured
 *   MOD_PAUSE_OUTLIVES_GRACE
 *                     (with CAPTURES) drop the grace-period assumption of "never reached the PSP"
 *   MOD_REPLAY        (with CAPTURES) `recon jobs replay` of a dead modification job, and the reconcile job's
 *                     decision and its write as two steps (its read, then its finish's compare-and-set)
 *   FIX_HEAL_CAS_UPDATED_AT
 *                     (with MOD_REPLAY) that compare-and-set also on the updated_at the reconcile job read
 *   REVIEW_ROUNDTRIP  (with CAPTURES) the captured payment goes to review and is resolved back to succeeded by hand
 *   FIX_REVIEW_KEEPS_CAPTURED
 *                     (with REVIEW_ROUNDTRIP) that resolution keeps captured_amount (finding 4's fix)
 *   NO_CANCEL, NO_RET, NO_HB, NO_WATCHER, FENCE_OWNER_ONLY, NW=, MAXCRASH=
 *                     smaller or mutated instances (the mutations must produce counterexamples)
 */

#ifndef NW
#define NW 3
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#define NJ 2
#define CH 0            /* the payment's charge job, unique key charge:<id> */
#define RC 1            /* its reconcile job, unique key reconcile:<id> */
#define MAXA 2          /* jobs.max_attempts at enqueue */
#ifndef ABOUND_CH
#define ABOUND_CH 3     /* model bound: claims of the charge job */
#endif
#ifndef ABOUND_RC
#define ABOUND_RC 1     /* model bound: claims of the reconcile job */
#endif
#define ABOUND(jj) (jj == CH -> ABOUND_CH : ABOUND_RC)
#define LIVE 1          /* jl: lease_until > now; 0: lease_until < now (expired) */

/* jobs.state; pending, runnable and retryable are one value: run_after is abstracted away */
#define CLAIMABLE 1
#define LEASED 2
#define SUCCEEDED 3
#define DEAD 4
#define CANCELED 5
#define JOB_FINISHED(j) (js[j] == SUCCEEDED || js[j] == DEAD || js[j] == CANCELED)

/* payments.status */
#define CREATED 1
#define PROCESSING 2
#define PENDING 3
#define PSUCCEEDED 4
#define FAILED 5
#define NEEDS_REVIEW 6
#define FINAL(s) (s >= PSUCCEEDED)
#define UNFINISHED(s) (s <= PENDING)
/* recon/rows.py TRANSITIONS (check_transition runs before the SQL, on the handler's snapshot) */
#define LEGAL(f, t) ( \
    (f == CREATED && t != CREATED) || \
    (f == PROCESSING && t >= PENDING) || \
    (f == PENDING && t >= PSUCCEEDED) || \
    ((f == PSUCCEEDED || f == FAILED) && t == NEEDS_REVIEW) || \
    (f == NEEDS_REVIEW && (t == PSUCCEEDED || t == FAILED)))

/* what the PSP answers, and keeps under one idempotency key */
#define A_NONE 0
#define A_SUCC 1        /* charged, answer succeeded */
#define A_DECL 2        /* declined: no money */
#define A_LOST 3        /* charged, the answer was lost (5xx after processing): unknown outcome */
#define A_NOCONTACT 4   /* never reached the PSP (connect error): nothing kept */
#define A_NOTFOUND 5    /* fetch_payment: no payment for the reference */

/* handler outcomes (recon/engine/outcome.py) and the domain write a finish carries */
#define O_COMPLETE 1
#define O_RETRY 2
#define O_SNOOZE 3
#define O_DEAD 4
#define W_NONE 0
#define W_CAS 1         /* PaymentStore.apply: status CAS st -> tgt plus its event */
#define W_RENEW 2       /* PaymentStore.next_key_generation: CAS on the generation */
#define W_NEVER 3       /* reconcile: CAS st -> failed, then roll back if the charge job is unfinished */

/* the properties' assertions; ASSERTS_OFF leaves them to the ltl claims alone */
#ifdef ASSERTS_OFF
#define CHECK(x) skip
#else
#define CHECK(x) assert(x)
#endif

/* --- the jobs table ----------------------------------------------------------------------------------- */
byte js[NJ];            /* jobs.state */
byte ja[NJ];            /* jobs.attempts: the claim counter and fencing token */
byte jm[NJ];            /* jobs.max_attempts */
byte jo[NJ];            /* jobs.lease_owner: 0 is NULL, else the worker's id */
byte jl[NJ];            /* LIVE (lease_until > now) or 0 (lease_until < now: expired) */
bool jc[NJ];            /* jobs.cancel_requested */
bool jlock[NJ];         /* the row is locked by an open finish transaction (SKIP LOCKED skips it) */

/* --- the payments row, its lock, and the PSP ------------------------------------------------------------ */
byte pay = CREATED;     /* payments.status */
byte plock = 0;         /* the worker whose open transaction holds the payment row lock (0: none) */
byte kgen = 0;          /* payments.key_generation */
byte ksent = 0;         /* payments.key_sent_at: 0 NULL, 1 recent, 2 older than retention - margin */
byte psp[2];            /* per key generation: the answer the PSP keeps under that key (A_*) */
bool forgot[2];         /* the PSP's retention of that key has passed */
byte inwin = 0;         /* workers between their payment read and their PSP call's answer */
#ifdef FIX_HEAL_AFTER_LAST_SEND
byte stamped = 0;       /* workers whose stamp (payment_touch_if_unfinished) has no landed request yet */
#define AND_STAMP ; stm = true; stamped++
#define AND_UNSTAMP ; if :: stm -> stm = false; stamped-- :: else fi
#define HEAL_AFTER_LAST_SEND && stamped == 0
#else
#define AND_STAMP
#define AND_UNSTAMP
#define HEAL_AFTER_LAST_SEND
#endif

/* --- bounded environment ----------------------------------------------------------------------------- */
byte crashes = 0, cfgdead = 0, replays = 0, cancels = 0, rets = 0;

/* --- ghosts: what the properties talk about ------------------------------------------------------------ */
byte ended[NJ];         /* the highest attempt whose end (finish or rescue) took effect */
bool dup_end = false;   /* an attempt ended twice: property 1 */
bool bad_write = false; /* a payment status write committed with a finish that did not match: property 2 */
byte charges = 0;       /* how many times the PSP took money for the payment */
bool keyc[2];           /* money taken under key generation g: property 4 */
bool never_reached = false; /* reconcile committed "failed: never reached the PSP" */
bool late_charge = false;   /* money taken after that: property 5 (the handlers' own claim) */

/* worker ids: handler threads 1 and 2 run in worker process 1, thread 3 in process 2 (lease_owner names the
   process, make_worker_id: host:pid:random) */
#define ME ((w + 1) / 2)
#ifdef FENCE_OWNER_ONLY
#define FENCE_HOLDS (js[j] == LEASED && jo[j] == ME)          /* mutation: the attempt part left out */
#else
#define FENCE_HOLDS (js[j] == LEASED && jo[j] == ME && ja[j] == a)
#endif
#ifdef UNFENCED
#define FINISH_MATCHES true                 /* tests/chaos/unfenced_worker.py: WHERE id = :id */
#else
#define FINISH_MATCHES FENCE_HOLDS          /* WHERE id AND attempts AND lease_owner AND state = 'leased' */
#endif

/* an attempt ends (history row in job_attempts, primary key (job_id, attempt)) */
inline end_attempt(jj, aa) {
    if
    :: aa <= ended[jj] -> dup_end = true
    :: else -> ended[jj] = aa
    fi;
    CHECK(!dup_end)
}

/* the job's next state (job_finish_*_if_owner; RetryPolicy.decide for a retry) */
inline job_update(jj, o) {
    if
    :: o == O_COMPLETE -> js[jj] = SUCCEEDED
    :: o == O_DEAD -> js[jj] = DEAD
    :: o == O_RETRY && ja[jj] >= jm[jj] -> js[jj] = DEAD
    :: o == O_RETRY && ja[jj] < jm[jj] -> js[jj] = (jc[jj] -> CANCELED : CLAIMABLE)
    :: o == O_SNOOZE -> js[jj] = (jc[jj] -> CANCELED : CLAIMABLE); jm[jj] = jm[jj] + 1  /* bump */
    fi;
    jo[jj] = 0; jl[jj] = 0
}

/* PaymentStore.apply inside a finish: the status CAS and its event */
inline status_cas(from, to) {
    if
    :: pay == from ->
        if
        :: !FENCE_HOLDS -> bad_write = true
        :: else
        fi;
        CHECK(!bad_write);
        pay = to
    :: else                                   /* no row: someone changed it first; apply() is False */
    fi
}

/* the PSP receives a charge under key generation g (PspAdapter.create_payment, idempotency_key): a
   declined charge is left out (like succeeded, it makes the payment final by the same CAS) */
inline psp_charge(g) {
    if
    :: psp[g] != A_NONE && !forgot[g] -> ans = psp[g]          /* the key's saved answer, replayed */
    :: else ->
        forgot[g] = false;
        if
        :: ans = A_SUCC
        :: ans = A_LOST
        :: ans = A_NOCONTACT
        fi;
        if
        :: ans == A_SUCC || ans == A_LOST ->
            charges++; keyc[g] = true;
            if
            :: never_reached -> late_charge = true
            :: else
            fi
        :: else
        fi;
        if
        :: ans != A_NOCONTACT -> psp[g] = ans
        :: else
        fi
    fi;
    CHECK(!(keyc[0] && keyc[1]))                               /* property 4 */
}

/* PspAdapter.fetch_payment: the PSP's truth for the merchant reference (not lagging) */
inline psp_fetch() {
    if
    :: charges > 0 -> ans = A_SUCC
    :: else -> ans = A_NOTFOUND
    fi
}

/* the heartbeat thread may beat first (job_extend_leases_if_owner); a lease missing from its answer is lost,
   and lease.check() raises LeaseLost: the result is dropped */
#ifdef NO_HB
#define HEARTBEAT_THEN_CHECK skip
#else
#define HEARTBEAT_THEN_CHECK \
    if \
    :: FENCE_HOLDS -> jl[j] = LIVE \
    :: !FENCE_HOLDS -> inwin--; RESET_LOCALS; goto end_idle \
    :: true \
    fi
#endif

/* SEND_UNDER_LEASE: the request of a worker whose lease is gone never lands (a pause never outlasts the ttl) */
#ifdef SEND_UNDER_LEASE
#define SEND_CHECK \
    if \
    :: !FENCE_HOLDS -> inwin--; RESET_LOCALS; goto end_idle \
    :: else \
    fi
#else
#define SEND_CHECK skip
#endif

#ifdef PAUSE_OUTLIVES_RETENTION
#define RET_GUARD true
#else
#define RET_GUARD (inwin == 0)
#endif

#define RESET_LOCALS j = 0; a = 0; st = 0; gen = 0; ks = 0; tgt = 0; out = 0; ans = 0; wr = W_NONE; \
                     unf = false; cas = false AND_UNSTAMP

/* job_claim_available: attempts + 1, lease_owner, lease_until; then maybe a crash holding the lease */
#define CLAIM(jj, said) \
    js[jj] == CLAIMABLE && !jc[jj] && ja[jj] < ABOUND(jj) && !jlock[jj] -> \
    j = jj; js[j] = LEASED; ja[j]++; jo[j] = ME; jl[j] = LIVE; a = ja[j]; \
    printf(said, w, ME, a); \
    if \
    :: w == NW && crashes < MAXCRASH -> crashes++; printf("| t%d crashes holding the lease\n", w); goto crashed \
    :: true \
    fi

proctype Worker(byte w) {
    byte j, a, st, gen, ks, tgt, out, ans, wr;
    bool unf, cas;
#ifdef FIX_HEAL_AFTER_LAST_SEND
    bool stm;           /* this worker stamped and its request has not landed */
#endif
end_idle:
    do
    :: atomic {                             /* claim the charge job, then ChargeHandler: ledger.get */
        CLAIM(CH, "| t%d (worker %d) claims the charge job: attempt %d\n");
        st = pay; gen = kgen; ks = ksent; inwin++;
        printf("| t%d reads the payment: status %d, key generation %d, key_sent_at %d\n", w, st, gen, ks);
        if
        :: FINAL(st) -> inwin--; out = O_COMPLETE; goto finish          /* known already */
#ifdef REPLAY
        :: !FINAL(st) && cfgdead < 1 ->                                 /* config_dead: PSP settings missing */
            cfgdead++; inwin--; out = O_DEAD; printf("| t%d: the PSP's settings are missing: dead\n", w); goto finish
#endif
        :: !FINAL(st) && st != CREATED && ks == 2 -> goto look          /* _key_may_be_forgotten */
        :: !FINAL(st) && (st == CREATED || ks != 2) -> goto charge_txn
        fi
       }
    :: atomic {                             /* claim the reconcile job, then ReconcileHandler: get_with_charge_lease,
                                               fetch_payment, _decide and _not_found */
        CLAIM(RC, "| t%d (worker %d) claims the reconcile job: attempt %d\n");
        st = pay; unf = (js[CH] == LEASED && jl[CH] == LIVE); psp_fetch();
        printf("| t%d reads the payment (status %d, charge lease live %d); the PSP says %d\n", w, st, unf, ans);
        if
        :: FINAL(st) -> out = O_COMPLETE
        :: !FINAL(st) && unf -> out = O_SNOOZE                          /* the charge holds a live lease */
        :: !FINAL(st) && !unf && ans == A_SUCC -> out = O_COMPLETE; wr = W_CAS; tgt = PSUCCEEDED  /* heal */
        :: !FINAL(st) && !unf && ans == A_NOTFOUND -> out = O_SNOOZE    /* inside the grace period */
        :: !FINAL(st) && !unf && ans == A_NOTFOUND && !JOB_FINISHED(CH) -> out = O_SNOOZE  /* charge_unfinished */
        :: !FINAL(st) && !unf && ans == A_NOTFOUND && JOB_FINISHED(CH) HEAL_AFTER_LAST_SEND ->
            out = O_COMPLETE; wr = W_NEVER; tgt = FAILED                /* "never reached the PSP" */
        fi;
        unf = false;
        goto finish
       }
    od;

/* --- recon/payments/charge.py ChargeHandler.__call__, after its first read ----------------------------- */
charge_txn:
    atomic {                                /* _mark_processing (created) or _still_unfinished: one transaction */
        plock == 0;
        if
        :: !FENCE_HOLDS -> inwin--; RESET_LOCALS; goto end_idle   /* lease.holds false: LeaseLost, dropped */
        :: else
        fi;
        if
        :: st == CREATED ->
            if
            :: pay == CREATED -> pay = PROCESSING           /* apply: CAS created -> processing, result ignored */
            :: else
            fi;
            if
            :: UNFINISHED(pay) -> ksent = 1 AND_STAMP       /* touch_unfinished stamps key_sent_at */
            :: else                                         /* ... or returns None, ignored */
            fi;
            st = pay; gen = kgen; ks = ksent;               /* current = get(payment.id, conn) */
            printf("| t%d _mark_processing: the payment is now %d\n", w, st)
#ifdef FIX_MARK_PROCESSING
            ;
            if
            :: FINAL(st) -> inwin--; out = O_COMPLETE; goto finish
            :: else
            fi
#endif
        :: else ->
            if
            :: UNFINISHED(pay) -> ksent = 1 AND_STAMP
            :: else -> inwin--; out = O_COMPLETE; goto finish   /* healed since we read it: nothing to send */
            fi
        fi
    }
    atomic {                                /* a heartbeat may run first; lease.check(); create_payment(key) */
        HEARTBEAT_THEN_CHECK;
        SEND_CHECK;
        psp_charge(gen); inwin-- AND_UNSTAMP;
        printf("| t%d sends the charge with key generation %d: the PSP answers %d (money taken %d times)\n",
               w, gen, ans, charges);
        if
        :: ans == A_SUCC -> out = O_COMPLETE; wr = W_CAS; tgt = PSUCCEEDED
        :: ans == A_LOST && st != PENDING -> out = O_RETRY; wr = W_CAS; tgt = PENDING   /* _pending */
        :: ans == A_LOST && st == PENDING -> out = O_RETRY                    /* keep_evidence: no change */
        :: ans == A_NOCONTACT -> out = O_RETRY                                /* unchanged, retry */
        fi
    }
    goto finish;

look:
    atomic {                                /* _look_before_resending: lease.check(), fetch_payment */
        HEARTBEAT_THEN_CHECK;
        psp_fetch(); inwin--;
        printf("| t%d looks the payment up before re-sending: the PSP says %d\n", w, ans);
        if
        :: ans == A_SUCC -> out = O_COMPLETE; wr = W_CAS; tgt = PSUCCEEDED
        :: ans == A_NOTFOUND -> out = O_SNOOZE; wr = W_RENEW           /* Snooze(0, write=renew) */
        fi
    }
    goto finish;

/* --- JobStore.finish: fenced, with the domain write (Outcome.write) in the same transaction ------------- */
finish:
    atomic {
        (wr == W_NONE || plock == 0) && !jlock[j];
        if
        :: !FINISH_MATCHES ->                                       /* stale finish: matched nothing */
            printf("| t%d finish of attempt %d rejected by the fence\n", w, a);
            RESET_LOCALS; goto end_idle
        :: else
        fi;
#ifndef SQLITE
        if
        :: wr == W_NEVER ->                 /* PostgreSQL: statement 1 of 3, the fenced update and the CAS */
            cas = (pay == st); jlock[j] = true;
            printf("| t%d reconcile heal, statement 1: CAS %d -> failed matched %d\n", w, st, cas);
            if
            :: cas -> plock = w             /* the CAS holds the payment row until commit */
            :: else
            fi;
            goto finish_split
        :: else
        fi;
#endif
        printf("| t%d finishes job %d attempt %d: outcome %d, write %d (%d -> %d), payment %d\n",
               w, j, a, out, wr, st, tgt, pay);
        end_attempt(j, a);
        if
        :: wr != W_NONE && wr != W_RENEW && !LEGAL(st, tgt) ->
            out = O_RETRY                   /* IllegalTransition: rolled back, finished as a bug */
        :: wr == W_CAS -> status_cas(st, tgt)
        :: wr == W_RENEW ->                 /* payment_next_key_generation_if */
            if
            :: kgen == gen && UNFINISHED(pay) ->
                if
                :: !FENCE_HOLDS -> bad_write = true
                :: else
                fi;
                CHECK(!bad_write);
                kgen++; ksent = 0
            :: else
            fi
        :: wr == W_NEVER ->
            if
            :: pay == st && !JOB_FINISHED(CH) -> out = O_RETRY      /* ChargeInFlight: rolled back */
            :: pay == st && JOB_FINISHED(CH) -> status_cas(st, tgt); never_reached = true
            :: else
            fi
        :: else
        fi;
        job_update(j, out);
        RESET_LOCALS; goto end_idle
    }

#ifndef SQLITE
finish_split:
    atomic {                                /* statement 2: charge_unfinished, a new snapshot */
        unf = !JOB_FINISHED(CH);
        printf("| t%d reconcile heal, statement 2: charge job unfinished %d\n", w, unf)
    }
    atomic {                                /* commit, or ChargeInFlight rolls back */
        jlock[j] = false; plock = 0;
        printf("| t%d reconcile heal commits (rolled back: %d)\n", w, cas && unf);
        end_attempt(j, a);
        if
        :: cas && unf -> out = O_RETRY
        :: cas && !unf -> status_cas(st, tgt); never_reached = true
        :: else
        fi;
        job_update(j, out);
        RESET_LOCALS; goto end_idle
    }
#endif

crashed:
    skip
}

/* --- recon/engine/watcher.py Watcher.run_once: JobStore.rescue_expired (job_rescue_expired) ------------- */
inline rescue(jj) {
    if
    :: js[jj] == LEASED && jl[jj] == 0 && !jlock[jj] ->
        end_attempt(jj, ja[jj]);
        js[jj] = (jc[jj] -> CANCELED : (ja[jj] >= jm[jj] -> DEAD : CLAIMABLE));
        jo[jj] = 0;
        printf("| the watcher rescues job %d attempt %d: state %d\n", jj, ja[jj], js[jj])
    :: else
    fi
}

proctype Watcher() {
#ifdef NO_WATCHER
    skip
#else
end:
    do
    :: atomic {
        ((js[CH] == LEASED && jl[CH] == 0 && !jlock[CH]) || (js[RC] == LEASED && jl[RC] == 0 && !jlock[RC])) ->
        rescue(CH); rescue(RC)
       }
    od
#endif
}

/* --- the clock: leases age (lease_until < now is jl == 0) ----------------------------------------------- */
proctype Clock() {
end:
    do
    :: atomic { jl[CH] == LIVE -> jl[CH] = 0; printf("| the charge lease expires\n") }
    :: atomic { jl[RC] == LIVE -> jl[RC] = 0; printf("| the reconcile lease expires\n") }
    od
}

/* --- operators and the PSP's retention (bounded) --------------------------------------------------------- */
proctype Environment() {
end:
    do
#ifdef REPLAY
    :: atomic {                     /* recon jobs replay: job_replay_dead (attempts kept, budget 1) */
        replays < 1 && js[CH] == DEAD && !jlock[CH] ->
        replays++; js[CH] = CLAIMABLE; jm[CH] = ja[CH] + 1; jc[CH] = false;
        printf("| an operator replays the dead charge job\n")
       }
#endif
#ifndef NO_CANCEL
    :: atomic {                     /* recon jobs cancel, not running: job_cancel_unleased */
        cancels < 1 && js[RC] == CLAIMABLE && !jlock[RC] -> cancels++; js[RC] = CANCELED; jc[RC] = true
       }
    :: atomic {                     /* recon jobs cancel, running: job_request_cancel_leased */
        cancels < 1 && js[RC] == LEASED && !jlock[RC] -> cancels++; jc[RC] = true
       }
#endif
#ifndef NO_RET
    :: atomic {                     /* RETAIN: the PSP's idempotency retention passes */
        rets < 1 && RET_GUARD ->
        rets++;
        forgot[0] = (psp[0] != A_NONE); forgot[1] = (psp[1] != A_NONE);
        if :: ksent == 1 -> ksent = 2 :: else fi;
        printf("| the PSP's idempotency retention passes\n")
       }
#endif
    od
}

#ifdef REFUNDS
/* === refunds (recon/db/refund_queries.py, recon/db/refund_store.py, recon/payments/refund.py,
   recon/reconcile/refund.py) ================================================================================
   One payment, succeeded, with CAPTURED units captured; NR refunds asked for (refund i of RAMT(i) units), each
   with its refund job (the lease protocol above, reduced to what fences the refund's writes: state, attempt,
   owner, lease) on RW workers; the stuck watcher; the refund's reconcile job (the "never reached the PSP" heal,
   a recheck of a final refund); the PSP, which keeps one refund per idempotency key (each refund's own key) and
   may fail a refund after it succeeded. */
#define NR 2
#define RW 2
#define CAPTURED 2
#define RAMT(i) (i + 1)                 /* refund 0: 1 unit, refund 1: 2 units */
#define RMAXA 2
#define R_NONE 0                        /* not asked (or refused) */
#define R_NOPSP 0                       /* the PSP holds nothing for the key */
#define R_MADE 1                        /* the PSP refunded under the key */
#define R_FAILED_AT_PSP 2               /* the PSP failed it (at once, or after it succeeded) */

byte refunded = 0;                      /* payments.refunded_amount */
byte rs[NR];                            /* refunds.status (R_NONE: no row) */
byte rjs[NR];                           /* its refund job's state */
byte rja[NR];                           /* attempts: the fencing token */
byte rjo[NR];                           /* lease_owner: 0 NULL, else the worker */
byte rjl[NR];                           /* LIVE or expired */
byte rpsp[NR];                          /* what the PSP keeps under the refund's key */
byte inflight[NR];                      /* stamped requests not landed yet (refund_mark_sent_if_unfinished) */
bool rnever[NR];                        /* reconcile committed "failed: never reached the PSP" */
bool late_refund = false;               /* the PSP refunded after that: never_reached_refund_holds */
bool inexact = false;                   /* refunded was seen other than the sum of refunds not failed */
byte rended[NR];

#define OWED(i) ((rs[i] != R_NONE && rs[i] != FAILED) -> RAMT(i) : 0)
#define RFENCE(i, ww, aa) (rjs[i] == LEASED && rjo[i] == ww && rja[i] == aa)
#define R_UNFINISHED(st) (st == CREATED || st == PROCESSING || st == PENDING)

/* RefundStore.create: payment_reserve_refund (the conditional UPDATE), the refund row, its job: one transaction */
proctype Asker(byte i) {
    atomic {
#ifdef REFUND_UNBOUNDED
        if :: true ->
#else
        if :: refunded + RAMT(i) <= CAPTURED ->
#endif
            refunded = refunded + RAMT(i); rs[i] = CREATED; rjs[i] = CLAIMABLE;
            printf("| refund %d of %d asked for: refunded %d\n", i, RAMT(i), refunded)
        :: else -> printf("| refund %d refused: RefundRefused\n", i)
        fi
    }
}

/* RefundStore.apply to failed gives the amount back (payment_release_refund), in the same transaction */
inline refund_fail(i) {
    rs[i] = FAILED; refunded = refunded - RAMT(i)
}

inline refund_end_attempt(i, aa) {
    if :: aa <= rended[i] -> dup_end = true :: else -> rended[i] = aa fi;
    CHECK(!dup_end)
}

proctype RefundWorker(byte w) {
    byte i, a, ans;
    bool stm;
end_idle:
    do
    :: atomic {                                 /* claim (job_claim_available) */
        (rjs[0] == CLAIMABLE || rjs[1] == CLAIMABLE) ->
        if :: rjs[0] == CLAIMABLE -> i = 0 :: rjs[1] == CLAIMABLE -> i = 1 fi;
        rjs[i] = LEASED; rja[i]++; a = rja[i]; rjo[i] = w; rjl[i] = LIVE
       };
        atomic {                                /* RefundHandler._claim_send: lease.holds, created -> processing,
                                                   refund_mark_sent_if_unfinished (the refund row lock) */
            if
            :: RFENCE(i, w, a) && R_UNFINISHED(rs[i]) ->
                if :: rs[i] == CREATED -> rs[i] = PROCESSING :: else fi;
                inflight[i]++; stm = true
            :: RFENCE(i, w, a) && !R_UNFINISHED(rs[i]) ->      /* final already: Complete, nothing sent */
                refund_end_attempt(i, a); rjs[i] = SUCCEEDED; rjo[i] = 0; rjl[i] = 0; goto end_idle
            :: else -> goto end_idle                            /* LeaseLost: nothing sent */
            fi
        };
        atomic {                                /* the PSP receives the request under the refund's key */
            if
            :: rpsp[i] == R_NOPSP ->
                if
                :: rpsp[i] = R_MADE
                :: rpsp[i] = R_FAILED_AT_PSP
                fi
            :: else                              /* the key's saved answer is replayed: nothing new */
            fi;
            if
            :: rnever[i] && rpsp[i] == R_MADE -> late_refund = true;
                printf("| w%d's request for refund %d lands after never reached: the PSP refunds it\n", w, i)
            :: else
            fi;
            inflight[i]--; stm = false;
            if
            :: ans = rpsp[i]                     /* the answer arrives */
            :: ans = R_NOPSP                     /* lost answer: PspUnknownOutcome */
            fi
        };
        atomic {                                /* the fenced finish with the refund's write */
            if
            :: RFENCE(i, w, a) ->
                refund_end_attempt(i, a);
                if
                :: ans == R_MADE && R_UNFINISHED(rs[i]) -> rs[i] = PSUCCEEDED; rjs[i] = SUCCEEDED
                :: ans == R_FAILED_AT_PSP && R_UNFINISHED(rs[i]) -> refund_fail(i); rjs[i] = SUCCEEDED
                :: ans == R_NOPSP ->            /* pending, retry with the same key */
                    if :: R_UNFINISHED(rs[i]) -> rs[i] = PENDING :: else fi;
                    rjs[i] = (rja[i] >= RMAXA -> DEAD : CLAIMABLE)
                :: else -> rjs[i] = SUCCEEDED   /* decided meanwhile: its answer stands */
                fi;
                rjo[i] = 0; rjl[i] = 0
            :: else                              /* a stale finish: matches nothing, writes nothing */
            fi;
            printf("| w%d finishes refund %d attempt %d: refund %d, refunded %d\n", w, i, a, rs[i], refunded)
        }
    od
}

/* the refund's reconcile job, one step per decision (RefundReconcileHandler): fetch_refund and the write */
#ifdef REFUND_PAUSE_OUTLIVES_GRACE
#define GRACE_PASSED(i) true
#else
#define GRACE_PASSED(i) (inflight[i] == 0)  /* the grace counts from the last send's stamp: none in flight */
#endif
inline reconcile_refund(i) {
    if
    /* not found, no refund id, its refund job finished (may no longer send), past the grace period: failed */
    :: R_UNFINISHED(rs[i]) && rpsp[i] == R_NOPSP && rjs[i] != CLAIMABLE && rjs[i] != LEASED && GRACE_PASSED(i) ->
        refund_fail(i); rnever[i] = true; printf("| reconcile: refund %d never reached the PSP\n", i)
    :: R_UNFINISHED(rs[i]) && rpsp[i] == R_MADE -> rs[i] = PSUCCEEDED; printf("| reconcile heals refund %d\n", i)
    :: R_UNFINISHED(rs[i]) && rpsp[i] == R_FAILED_AT_PSP -> refund_fail(i)
    /* a recheck: the PSP failed a refund after it succeeded: a person looks, the amount still counted */
    :: rs[i] == PSUCCEEDED && rpsp[i] == R_FAILED_AT_PSP -> rs[i] = NEEDS_REVIEW
    fi
}
#define RJOB_DONE(i) (rjs[i] != CLAIMABLE && rjs[i] != LEASED)
#define NEVER_OK(i) (RJOB_DONE(i) && GRACE_PASSED(i))
#define RECONCILABLE(i) ((R_UNFINISHED(rs[i]) && (rpsp[i] != R_NOPSP || NEVER_OK(i))) || (rs[i] == PSUCCEEDED && rpsp[i] == R_FAILED_AT_PSP))

proctype RefundReconciler() {
end:
    do
    :: atomic { RECONCILABLE(0) -> reconcile_refund(0) }
    :: atomic { RECONCILABLE(1) -> reconcile_refund(1) }
    od
}

/* the PSP fails a refund after it succeeded (Stripe's refund.failed, Adyen's REFUNDED_REVERSED) */
proctype RefundPsp() {
end:
    do :: atomic { rpsp[0] == R_MADE -> rpsp[0] = R_FAILED_AT_PSP } od
}

proctype RefundWatcher() {
    byte i;
end:
    do
    :: atomic {
        (rjs[0] == LEASED && rjl[0] == 0) || (rjs[1] == LEASED && rjl[1] == 0) ->
        if :: rjs[0] == LEASED && rjl[0] == 0 -> i = 0 :: rjs[1] == LEASED && rjl[1] == 0 -> i = 1 fi;
        refund_end_attempt(i, rja[i]);
        rjs[i] = (rja[i] >= RMAXA -> DEAD : CLAIMABLE); rjo[i] = 0
       }
    :: atomic { rjl[0] == LIVE -> rjl[0] = 0 }
    :: atomic { rjl[1] == LIVE -> rjl[1] = 0 }
    od
}

/* checked after every step (as assertions, and as the ltl claims below) */
active proctype RefundInvariants() {
end:
    do
    :: atomic {
        !(refunded <= CAPTURED && refunded == OWED(0) + OWED(1)) && !inexact ->
        inexact = (refunded != OWED(0) + OWED(1));
        CHECK(refunded <= CAPTURED); CHECK(!inexact)
       }
    od
}

init {
    atomic {
        run Asker(0); run Asker(1);
        run RefundWorker(1); run RefundWorker(2);
        run RefundReconciler(); run RefundPsp(); run RefundWatcher()
    }
}
#elif defined(CAPTURES)
/* === captures and cancels (recon/db/modification_queries.py, recon/db/modification_store.py,
   recon/payments/modification.py, recon/reconcile/modification.py, recon/reconcile/modification_webhook.py) =====
   One authorised manual-capture payment of AUTH units and three modifications asked for at any time
   (ModificationStore.create: the claim on the authorisation, the row and its job, one transaction): capture 0 of 1
   unit, capture 1 of all 2 units, and a cancel. Their jobs (kinds capture and cancel) run on MW workers under the
   lease protocol above, reduced to what fences the modification's writes (state, attempt, owner, lease), with one
   crash holding a lease, the clock and the stuck watcher; the PSP's later word (the webhook job: Adyen's CAPTURE,
   CAPTURE_FAILED, CANCELLATION, Stripe's payment_intent.*; the modification's reconcile job once its own job is
   done); a refund of 2 units asked for at any time (payment_reserve_refund's bound: the refund model above checks
   the rest of its life). The PSP keeps one answer per modification key and nothing else: the model does not let
   it refuse a capture after a cancel, or beyond the authorisation, so recon's own claim must keep them apart. */
#define NM 3
#define MW 2
#define AUTH 2                          /* payments.amount: authorised */
#define CANCEL_MOD 2                    /* modification 2 is the cancel; 0 and 1 are captures */
#define IS_CAPTURE(i) (i != CANCEL_MOD)
#define MAMT(i) (i == 0 -> 1 : AUTH)    /* a capture's amount; a cancel's is the payment's (what it releases) */
#define RA 2                            /* the refund asked for */
#define MMAXA 2                         /* the modification job's max_attempts in the model */
#ifdef MOD_REPLAY
#define MJM(i) mjm[i]                   /* jobs.max_attempts: recon jobs replay raises it */
#else
#define MJM(i) MMAXA
#endif
#define AUTHORISED 7                    /* payments.status authorised (the charge model has no such value) */
#define M_NOPSP 0                       /* the PSP holds nothing for the key */
#define M_MADE 1                        /* the PSP captured (mtook units) or cancelled under the key */
#define M_FAILED_AT_PSP 2               /* the PSP refused it */

byte pst = AUTHORISED;                  /* payments.status */
byte claimed = 0;                       /* payments.authorisation_claimed */
byte captured = 0;                      /* payments.captured_amount */
byte refunded = 0;                      /* payments.refunded_amount */
byte ms[NM];                            /* modifications.status (0: no row) */
byte mjs[NM];                           /* its job's state */
byte mja[NM];                           /* attempts: the fencing token */
byte mjo[NM];                           /* lease_owner: 0 NULL, else the worker */
byte mjl[NM];                           /* LIVE or expired */
byte mpsp[NM];                          /* what the PSP keeps under the modification's key */
byte mtook[NM];                         /* what the PSP captured under a capture's key (the answer's amount) */
byte minflight[NM];                     /* stamped requests not landed yet (modification_mark_sent_if_unfinished) */
byte mended[NM];
byte mcrashes = 0;
byte pcap = 0;                          /* ghost: money the PSP captured, all keys together */
bool pcancel = false;                   /* ghost: the PSP released the authorisation */
bool cinexact = false;                  /* ghost: the claim was seen other than what its live modifications hold */
bool cbad = false;                      /* ghost: a safety property's assertion failed (see ModInvariants) */
bool mnever[NM];                        /* reconcile committed "failed: never reached the PSP" */
bool never_lie = false;                 /* ghost: the PSP got a modification that "never reached" it */
#ifdef MOD_REPLAY
byte mjm[NM];                           /* jobs.max_attempts */
byte hread[NM];                         /* the reconcile job's read: the status it decided "never reached" on */
bool hstale[NM];                        /* updated_at moved since that read (a send's stamp, a note) */
byte mreplays = 0;
#define AND_HSTALE(i) ; if :: hread[i] != 0 -> hstale[i] = true :: else fi
#else
#define AND_HSTALE(i)
#endif

#define CLAIM_OF(i) (IS_CAPTURE(i) -> MAMT(i) : AUTH)
#define HELD(i) ((ms[i] != 0 && ms[i] != FAILED) -> CLAIM_OF(i) : 0)
#define MFENCE(i, ww, aa) (mjs[i] == LEASED && mjo[i] == ww && mja[i] == aa)
#define M_UNFINISHED(st) (st == CREATED || st == PROCESSING || st == PENDING)
#define CAPTURE_SUCCEEDED (ms[0] == PSUCCEEDED || ms[1] == PSUCCEEDED)
#define MOD_SAFE (claimed <= AUTH && pcap <= AUTH && !(CAPTURE_SUCCEEDED && ms[CANCEL_MOD] == PSUCCEEDED) && \
                  !(pcap > 0 && pcancel) && refunded <= captured && refunded <= pcap)

#ifdef MOD_REPLAY
#define MJM_INIT ; mjm[i] = MMAXA
#else
#define MJM_INIT
#endif

/* ModificationStore.create: payment_claim_capture / payment_claim_cancel (the conditional UPDATE), the
   modification's row, its job: one transaction, or refused with nothing written */
proctype ModAsker(byte i) {
    atomic {
        if
#ifdef MOD_UNBOUNDED
        :: IS_CAPTURE(i) && pst == AUTHORISED ->            /* the mutation: a capture's claim without its bound */
#else
        :: IS_CAPTURE(i) && pst == AUTHORISED && claimed == 0 && claimed + MAMT(i) <= AUTH ->
#endif
            claimed = claimed + MAMT(i); ms[i] = CREATED; mjs[i] = CLAIMABLE MJM_INIT
#ifdef MOD_NOT_ONE_LIVE
        :: !IS_CAPTURE(i) && pst == AUTHORISED ->            /* the mutation: a cancel while a capture is live */
#else
        :: !IS_CAPTURE(i) && pst == AUTHORISED && claimed == 0 ->
#endif
            claimed = AUTH; ms[i] = CREATED; mjs[i] = CLAIMABLE MJM_INIT
        :: else
        fi;
        if
        :: IS_CAPTURE(i) -> printf("| capture %d of %d asked for: %d (0: refused), claimed %d\n", i, MAMT(i), ms[i],
                                   claimed)
        :: else -> printf("| cancel %d asked for: %d (0: refused), claimed %d\n", i, ms[i], claimed)
        fi
    }
}

/* the modification moves to failed: payment_release_claim gives its claim back, in the same transaction */
inline mod_fail(i) {
    ms[i] = FAILED;
    if :: claimed >= CLAIM_OF(i) -> claimed = claimed - CLAIM_OF(i) :: else fi
}

/* the modification moves to succeeded: ModificationStore._effect, in the same transaction */
inline mod_succeed(i) {
    ms[i] = PSUCCEEDED;
    if
    :: IS_CAPTURE(i) && pst == AUTHORISED ->               /* payment_transition_if_status: captured = amount */
        pst = PSUCCEEDED; captured = AUTH
#ifndef MOD_NO_SET_CAPTURED
        ;                                                   /* payment_set_captured: what the PSP captured */
        if :: refunded <= mtook[i] -> captured = mtook[i] :: else fi
#endif
    :: !IS_CAPTURE(i) && pst == AUTHORISED -> pst = FAILED  /* "cancelled: ..." */
    :: else                                                 /* the payment moved already: apply() is False */
    fi
}

inline mod_end_attempt(i, aa) {
    if :: aa <= mended[i] -> dup_end = true :: else -> mended[i] = aa fi;
    CHECK(!dup_end)
}

#define MOD_RESET i = 0; a = 0; ans = 0

/* ModificationHandler (recon/payments/modification.py), one worker thread */
proctype ModWorker(byte w) {
    byte i, a, ans;
end_idle:
    do
    :: atomic {                                 /* claim (job_claim_available), then maybe a crash holding it */
        (mjs[0] == CLAIMABLE || mjs[1] == CLAIMABLE || mjs[2] == CLAIMABLE) ->
        if :: mjs[0] == CLAIMABLE -> i = 0 :: mjs[1] == CLAIMABLE -> i = 1 :: mjs[2] == CLAIMABLE -> i = 2 fi;
        mjs[i] = LEASED; mja[i]++; a = mja[i]; mjo[i] = w; mjl[i] = LIVE;
        printf("| w%d claims modification %d: attempt %d\n", w, i, a);
        if
        :: w == MW && mcrashes < MAXCRASH -> mcrashes++; printf("| w%d crashes holding the lease\n", w); goto crashed
        :: true
        fi
       };
        atomic {                                /* _claim_send: lease.holds, created -> processing,
                                                   modification_mark_sent_if_unfinished (the row lock, the stamp) */
            if
            :: MFENCE(i, w, a) && M_UNFINISHED(ms[i]) ->
                if :: ms[i] == CREATED -> ms[i] = PROCESSING :: else fi;
                minflight[i]++ AND_HSTALE(i);
                printf("| w%d stamps modification %d (attempt %d) and sends it\n", w, i, a)
            :: MFENCE(i, w, a) && !M_UNFINISHED(ms[i]) ->      /* final already: Complete, nothing sent */
                mod_end_attempt(i, a); mjs[i] = SUCCEEDED; mjo[i] = 0; mjl[i] = 0; MOD_RESET; goto end_idle
            :: else -> MOD_RESET; goto end_idle                 /* LeaseLost: nothing sent */
            fi
        };
        atomic {                                /* the PSP receives modify_payment under the modification's key */
            if
            :: mpsp[i] == M_NOPSP ->
                if
                :: mpsp[i] = M_MADE; mtook[i] = (IS_CAPTURE(i) -> MAMT(i) : 0)
                :: IS_CAPTURE(i) && MAMT(i) > 1 -> mpsp[i] = M_MADE; mtook[i] = 1     /* captured less than asked */
                :: mpsp[i] = M_FAILED_AT_PSP
                :: skip                          /* unavailable (a 5xx before processing): nothing kept */
                fi;
                if
                :: mpsp[i] == M_MADE && IS_CAPTURE(i) -> pcap = pcap + mtook[i]
                :: mpsp[i] == M_MADE && !IS_CAPTURE(i) -> pcancel = true
                :: else
                fi;
                if :: mnever[i] && mpsp[i] == M_MADE -> never_lie = true :: else fi;
                printf("| w%d's request for modification %d lands: the PSP keeps %d (captured %d, released %d)\n",
                       w, i, mpsp[i], pcap, pcancel)
            :: else                              /* the key's saved answer is replayed: nothing new */
            fi;
            minflight[i]--;
            if
            :: ans = mpsp[i]                     /* the answer arrives */
            :: ans = M_NOPSP                     /* lost answer (or Adyen's [received]): pending */
            fi
        };
        atomic {                                /* the fenced finish with the modification's write */
            if
            :: MFENCE(i, w, a) ->
                mod_end_attempt(i, a);
                if
                :: ans == M_MADE && M_UNFINISHED(ms[i]) -> mod_succeed(i); mjs[i] = SUCCEEDED
                :: ans == M_FAILED_AT_PSP && M_UNFINISHED(ms[i]) -> mod_fail(i); mjs[i] = SUCCEEDED
                :: ans == M_NOPSP ->            /* _pending, retry with the same key */
                    if :: M_UNFINISHED(ms[i]) -> ms[i] = PENDING AND_HSTALE(i) :: else fi;
                    mjs[i] = (mja[i] >= MJM(i) -> DEAD : CLAIMABLE)
                :: else -> mjs[i] = SUCCEEDED   /* decided meanwhile: its answer stands */
                fi;
                mjo[i] = 0; mjl[i] = 0
            :: else                              /* a stale finish: matches nothing, writes nothing */
            fi;
            printf("| w%d finishes modification %d attempt %d: modification %d, payment %d, claimed %d, captured %d\n",
                   w, i, a, ms[i], pst, claimed, captured);
            MOD_RESET
        }
    od;
crashed:
    skip
}

/* the PSP's later word, and reconciliation (recon/reconcile/modification.py, modification_webhook.py) */
#ifdef MOD_PAUSE_OUTLIVES_GRACE
#define MGRACE_PASSED(i) true
#else
#define MGRACE_PASSED(i) (minflight[i] == 0)    /* the grace counts from the last send's stamp: none in flight */
#endif
#define MJOB_DONE(i) (mjs[i] != CLAIMABLE && mjs[i] != LEASED)
/* the webhook job at any time, or the reconcile job once the modification's job is done: modification_heal */
#define M_HEALABLE(i) (M_UNFINISHED(ms[i]) && mpsp[i] != M_NOPSP)
/* the reconcile job: not found, no PSP id, its job done (may no longer send), past the grace period */
#define M_NEVER_OK(i) (M_UNFINISHED(ms[i]) && mpsp[i] == M_NOPSP && MJOB_DONE(i) && MGRACE_PASSED(i))
/* the reconcile job: pending, no final word after its schedule (Adyen cannot be asked): review */
#define M_REVIEWABLE(i) (ms[i] == PENDING && MJOB_DONE(i))

inline heal_mod(i) {
    if
    :: mpsp[i] == M_MADE -> mod_succeed(i)
    :: else -> mod_fail(i)
    fi;
    printf("| the PSP's word heals modification %d: %d, payment %d, claimed %d, captured %d\n", i, ms[i], pst,
           claimed, captured)
}

/* "failed: never reached the PSP" commits */
inline heal_never(i) {
    mod_fail(i); mnever[i] = true;
    if :: mpsp[i] == M_MADE -> never_lie = true :: else fi;
    printf("| reconcile: modification %d never reached the PSP (the PSP holds %d)\n", i, mpsp[i])
}

proctype ModHealer() {
end:
    do
    :: atomic { M_HEALABLE(0) -> heal_mod(0) }
    :: atomic { M_HEALABLE(1) -> heal_mod(1) }
    :: atomic { M_HEALABLE(2) -> heal_mod(2) }
#ifdef MOD_REPLAY
#ifdef FIX_HEAL_CAS_UPDATED_AT
#define HEAL_FRESH(i) && !hstale[i]     /* the fix: the compare-and-set also on the updated_at it read */
#else
#define HEAL_FRESH(i)
#endif
    /* the reconcile job decides on what it read (job_unfinished, fetch_modification: not found, the grace) and
       writes in its finish, later: the compare-and-set on that status, then ChargeInFlight if its job is unfinished */
    :: atomic { M_NEVER_OK(0) && hread[0] == 0 -> hread[0] = ms[0]; printf("| reconcile reads modification 0: %d, not found\n", ms[0]) }
    :: atomic { M_NEVER_OK(1) && hread[1] == 0 -> hread[1] = ms[1]; printf("| reconcile reads modification 1: %d, not found\n", ms[1]) }
    :: atomic { M_NEVER_OK(2) && hread[2] == 0 -> hread[2] = ms[2]; printf("| reconcile reads modification 2: %d, not found\n", ms[2]) }
    :: atomic { hread[0] != 0 -> if :: ms[0] == hread[0] && MJOB_DONE(0) HEAL_FRESH(0) -> heal_never(0) :: else fi; hread[0] = 0; hstale[0] = false }
    :: atomic { hread[1] != 0 -> if :: ms[1] == hread[1] && MJOB_DONE(1) HEAL_FRESH(1) -> heal_never(1) :: else fi; hread[1] = 0; hstale[1] = false }
    :: atomic { hread[2] != 0 -> if :: ms[2] == hread[2] && MJOB_DONE(2) HEAL_FRESH(2) -> heal_never(2) :: else fi; hread[2] = 0; hstale[2] = false }
    /* recon jobs replay: job_replay_dead (attempts kept, budget 1), once */
    :: atomic { mreplays < 1 && mjs[0] == DEAD -> mreplays++; mjs[0] = CLAIMABLE; mjm[0] = mja[0] + 1; printf("| an operator replays modification 0's dead job\n") }
    :: atomic { mreplays < 1 && mjs[1] == DEAD -> mreplays++; mjs[1] = CLAIMABLE; mjm[1] = mja[1] + 1; printf("| an operator replays modification 1's dead job\n") }
    :: atomic { mreplays < 1 && mjs[2] == DEAD -> mreplays++; mjs[2] = CLAIMABLE; mjm[2] = mja[2] + 1; printf("| an operator replays modification 2's dead job\n") }
#else
    :: atomic { M_NEVER_OK(0) -> heal_never(0) }
    :: atomic { M_NEVER_OK(1) -> heal_never(1) }
    :: atomic { M_NEVER_OK(2) -> heal_never(2) }
#endif
    :: atomic { M_REVIEWABLE(0) -> ms[0] = NEEDS_REVIEW }
    :: atomic { M_REVIEWABLE(1) -> ms[1] = NEEDS_REVIEW }
    :: atomic { M_REVIEWABLE(2) -> ms[2] = NEEDS_REVIEW }
    od
}

/* the clock (a lease ages past lease_until) and Watcher.run_once (job_rescue_expired) */
proctype ModWatcher() {
    byte i;
end:
    do
    :: atomic { mjl[0] == LIVE -> mjl[0] = 0 }
    :: atomic { mjl[1] == LIVE -> mjl[1] = 0 }
    :: atomic { mjl[2] == LIVE -> mjl[2] = 0 }
#ifndef NO_WATCHER
    :: atomic {
        (mjs[0] == LEASED && mjl[0] == 0) || (mjs[1] == LEASED && mjl[1] == 0) || (mjs[2] == LEASED && mjl[2] == 0) ->
        if
        :: mjs[0] == LEASED && mjl[0] == 0 -> i = 0
        :: mjs[1] == LEASED && mjl[1] == 0 -> i = 1
        :: mjs[2] == LEASED && mjl[2] == 0 -> i = 2
        fi;
        mod_end_attempt(i, mja[i]);
        mjs[i] = (mja[i] >= MJM(i) -> DEAD : CLAIMABLE); mjo[i] = 0;
        printf("| the watcher rescues modification %d's attempt %d: job %d\n", i, mja[i], mjs[i]);
        i = 0
       }
#endif
    od
}

/* RefundStore.create: payment_reserve_refund (status succeeded, refunded_amount + amount <= captured_amount) */
proctype CaptureRefund() {
    atomic {
        if
        :: pst == PSUCCEEDED && refunded + RA <= captured -> refunded = refunded + RA
        :: else
        fi;
        printf("| a refund of %d asked for: refunded %d of captured %d (the PSP captured %d)\n", RA, refunded,
               captured, pcap)
    }
}

#ifdef REVIEW_ROUNDTRIP
/* the payment goes to review after its capture (the PSP later disagrees: a recheck, a dispute) and a person
   resolves it back to succeeded: ReviewDesk.resolve -> payment_transition_if_status, which sets
   captured_amount = amount on every move to succeeded */
proctype PaymentReview() {
end:
    atomic { pst == PSUCCEEDED -> pst = NEEDS_REVIEW; printf("| the payment goes to review\n") };
    atomic {
        pst = PSUCCEEDED;
#ifndef FIX_REVIEW_KEEPS_CAPTURED
        captured = AUTH;                /* the fix: captured_amount kept on a move from needs_review */
#endif
        printf("| resolved by hand: succeeded, captured %d\n", captured)
    }
}
#endif

/* checked after every step (as assertions, and as the ltl claims below) */
active proctype ModInvariants() {
end:
    do
    :: atomic {
        !cinexact && claimed != HELD(0) + HELD(1) + HELD(2) -> cinexact = true; CHECK(!cinexact)
       }
    :: atomic { !cbad && !MOD_SAFE -> cbad = true; CHECK(MOD_SAFE) }
    od
}

init {
    atomic {
#if defined(ALL_THREE)
        run ModAsker(0); run ModAsker(1); run ModAsker(2);
#elif defined(TWO_CAPTURES)
        run ModAsker(0); run ModAsker(1);
#else
        run ModAsker(1); run ModAsker(2);
#endif
        run ModWorker(1); run ModWorker(2);
        run ModHealer(); run ModWatcher(); run CaptureRefund()
#ifdef REVIEW_ROUNDTRIP
        ; run PaymentReview()
#endif
    }
}
#else
init {
    byte i = 1;
    atomic {
        js[CH] = CLAIMABLE; js[RC] = CLAIMABLE; jm[CH] = MAXA; jm[RC] = MAXA;
        do
        :: i <= NW -> run Worker(i); i++
        :: else -> break
        od;
        run Watcher(); run Clock(); run Environment()
    }
}

#endif

/* --- the properties as LTL (each also an assertion above) ------------------------------------------------- */
/* 1: at most one end (finish or rescue) per attempt takes effect */
ltl one_end_per_attempt { [] !dup_end }
/* 2: a payment status write commits only with a finish whose owner and attempt still match (or by a CAS
      that saw the expected status: status_cas writes only when pay == from) */
ltl writes_fenced { [] !bad_write }
/* 3: no job is leased for ever: it ends succeeded/dead/canceled or becomes claimable again */
ltl no_lease_forever { [] ((js[CH] == LEASED) -> <> (js[CH] != LEASED)) && [] ((js[RC] == LEASED) -> <> (js[RC] != LEASED)) }
/* 4: the payment is never charged under two idempotency keys */
ltl one_key_charged { [] !(keyc[0] && keyc[1]) }
/* 5 (the handlers' own claim, not one of the issue's four): after "failed: never reached the PSP" commits,
      the PSP never takes money for the payment */
ltl never_reached_holds { [] !late_charge }

#ifdef REFUNDS
/* 6: the payment's refunded amount never exceeds what it captured */
ltl refunds_within_capture { [] (refunded <= CAPTURED) }
/* 7: it is exactly the sum of its refunds that have not failed */
ltl refunded_exact { [] !inexact }
/* 8: after "failed: never reached the PSP", the PSP never refunds it */
ltl never_reached_refund_holds { [] !late_refund }
#endif

#ifdef CAPTURES
/* 9: never more claimed of the authorisation, nor captured at the PSP, than authorised */
ltl captures_within_authorisation { [] (claimed <= AUTH && pcap <= AUTH) }
/* 10: the claim is exactly what its modifications that have not failed hold */
ltl claims_exact { [] !cinexact }
/* 11: a capture and a cancel of one payment never both succeed, in our records nor at the PSP */
ltl capture_or_cancel { [] !((ms[0] == PSUCCEEDED || ms[1] == PSUCCEEDED) && ms[CANCEL_MOD] == PSUCCEEDED) &&
                        [] !(pcap > 0 && pcancel) }
/* 12: refunds never exceed the captured amount, as recorded nor as the PSP captured it */
ltl refunds_within_captured { [] (refunded <= captured && refunded <= pcap) }
/* 14: after a modification's "failed: never reached the PSP", the PSP never made it (nor had made it) */
ltl never_reached_modification_holds { [] !never_lie }
/* 13: every capture and cancel asked for ends final or in review (under weak fairness: -a -f) */
ltl modifications_end { [] (M_UNFINISHED(ms[0]) -> <> (ms[0] >= PSUCCEEDED)) &&
                         [] (M_UNFINISHED(ms[1]) -> <> (ms[1] >= PSUCCEEDED)) &&
                         [] (M_UNFINISHED(ms[2]) -> <> (ms[2] >= PSUCCEEDED)) }
#endif
