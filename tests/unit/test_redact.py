"""recon.redact's shortcuts change no answer: ``redact`` skips the patterns for a text that has none of what
they need (``_MAYBE``), and ``redact_value`` remembers the short strings it found clean. Checked against the
patterns applied one by one (``_redact_all``) on generated texts near every pattern, and on what
tests/integration/test_redaction.py plants."""

from __future__ import annotations

import json
import random
import string

import pytest

import recon.redact as r
from tests.integration.test_redaction import CVC_TEXT, PLANTED, hostile_text

FRAGMENTS = [*PLANTED.values(), CVC_TEXT, "://", "user:pw@host", "Bearer ", "BASIC x", "sk_", "Pk_live_", "rk_test_x",
             "whsec_", "aqe", "AQEabcdefghijklmnopq", "password", "PassWd=", "pwd:", "api_key", "api-key", "apikey",
             "secret", "client_secret", "token", "Authorization", "cvc", "CVV2 ", "cvn", "cid", "csc",
             "security code", "security_code", "=", ":", '"', "'", " ", "-", "4242", "42424242", "4242 4242 4242",
             "4111-1111-1111-111", "378282246310005", "1234567890123", "123456789012", "2026-12-01T09:30:00+00:00",
             "pi_3MtwBwLkdIwHu7ix", "evt_1PqR2sT3uV4wX5yZ"]


def generated(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 6)):
        roll = rng.random()
        if roll < 0.5:
            frag = rng.choice(FRAGMENTS)
            cut = rng.randint(0, len(frag))
            frag = frag[:cut] if rng.random() < 0.3 else frag  # near misses: a field name or a number cut short
            parts.append(frag.upper() if rng.random() < 0.2 else frag)
        elif roll < 0.8:
            parts.append("".join(rng.choice(string.digits + " -") for _ in range(rng.randint(1, 22))))
        else:
            parts.append("".join(rng.choice(string.printable) for _ in range(rng.randint(1, 12))))
    return "".join(parts)


@pytest.mark.parametrize("seed", range(4))
def test_redact__the_quick_check_changes_no_answer(seed: int) -> None:
    rng = random.Random(seed)
    skipped = 0
    for _ in range(5_000):
        text = generated(rng)
        assert r.redact(text) == r._redact_all(text), text
        skipped += not r._maybe(text)
    assert skipped > 200  # the shortcut was taken, and agreed


@pytest.mark.parametrize("seed", range(2))
def test_redact__the_ascii_quick_check_answers_as_the_case_blind_one(seed: int) -> None:
    rng = random.Random(seed)
    texts = [generated(rng) for _ in range(5_000)] + [f.upper() for f in FRAGMENTS] + [f.title() for f in FRAGMENTS]
    ascii_texts = [text for text in texts if text.isascii()]
    assert len(ascii_texts) > 4_000
    for text in ascii_texts:
        assert r._maybe(text) == (r._MAYBE.search(text.lower()) is not None), text
    assert sum(map(r._maybe, ascii_texts)) > 1_000  # both answers were given


def test_redact__every_planted_secret_goes_the_whole_way() -> None:
    for text in [*PLANTED.values(), CVC_TEXT, hostile_text()]:
        assert r._maybe(text)
        assert r.redact(text) == r._redact_all(text) != text


def test_redact_value__remembers_only_clean_strings_and_answers_the_same() -> None:
    value = {"status": "succeeded", "note": PLANTED["card (spaces)"], "ref": "pi_3MtwBwLkdIwHu7ix",
             "items": ["eur", "sk_test_abcdef123", {"token": "t0k3n", "reason": "card_declined"}]}
    first, second = r.redact_value(value), r.redact_value(value)
    assert first == second == {"status": "succeeded", "note": "[card]", "ref": "pi_3MtwBwLkdIwHu7ix",
                               "items": ["eur", "[redacted]", {"token": "***", "reason": "card_declined"}]}
    assert {"succeeded", "pi_3MtwBwLkdIwHu7ix", "card_declined"} <= r._CLEAN
    assert not {PLANTED["card (spaces)"], "sk_test_abcdef123"} & r._CLEAN


def defined_redact_value(value: object) -> object:
    """``redact_value`` as its docstring defines it, written plainly (the comprehension it was before issue 29):
    the reference its quicker dict walk must agree with."""
    if isinstance(value, str):
        return r._redact_all(value)
    if isinstance(value, dict):
        return {k: (r.MASK if isinstance(k, str) and v not in (None, "") and not isinstance(v, bool)
                    and r._SECRET_KEYS.match(k) is not None else defined_redact_value(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [defined_redact_value(v) for v in value]
    return value


class Text(str):
    """A str subclass: walked as a string all the same."""


KEYS = ["status", "amount", "token", "client_secret", "Password", "api_key", "cvc", "reason", "metadata", "id",
        "secret_word", "payment_method", "authorization", "object", 7, 2.5, None, ("a", "b")]


def document(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth < 4 and roll < 0.25:
        return {rng.choice(KEYS): document(rng, depth + 1) for _ in range(rng.randint(0, 6))}
    if depth < 4 and roll < 0.35:
        items = [document(rng, depth + 1) for _ in range(rng.randint(0, 4))]
        return tuple(items) if rng.random() < 0.2 else items
    return rng.choice([None, True, False, "", 0, 1, 4242424242424242, -3, 2.5, float("inf"), generated(rng),
                       generated(rng), Text(generated(rng)), rng.choice(FRAGMENTS), b"bytes"])


@pytest.mark.parametrize("seed", range(3))
def test_redact_value__the_dict_walk_answers_as_the_definition(seed: int) -> None:
    rng = random.Random(seed)
    masked = 0
    for _ in range(3_000):
        doc = {rng.choice(KEYS): document(rng) for _ in range(rng.randint(1, 8))}
        got, want = r.redact_value(doc), defined_redact_value(doc)
        assert got == want, doc
        assert [type(v) for v in got.values() if not isinstance(v, str)] == [  # type: ignore[union-attr]
            type(v) for v in want.values() if not isinstance(v, str)]  # type: ignore[union-attr]
        masked += r.MASK in got.values()  # type: ignore[union-attr]
    assert masked > 300  # secret-named keys were met, and masked alike
    # the keys remembered as plain (walked again with a set lookup, no call) are never secret-named ones
    assert {"status", "amount", "reason", "metadata", "secret_word", "payment_method"} <= r._PLAIN_KEYS
    assert not {"token", "client_secret", "Password", "api_key", "cvc", "authorization"} & r._PLAIN_KEYS


def test_redact_value__a_remembered_plain_key_masks_nothing_and_a_secret_one_is_masked_every_time() -> None:
    body = {"id": "pi_1", "client_secret": "pi_1_secret_abc", "amount_details": {"tip": {}},
            "metadata": {"note": "4242 4242 4242 4242", "token": "t0k3n"}, "Password": ""}
    want = {"id": "pi_1", "client_secret": "***", "amount_details": {"tip": {}},
            "metadata": {"note": "[card]", "token": "***"}, "Password": ""}
    assert r.redact_value(body) == want
    assert r.redact_value(body) == want  # the second walk, through the remembered keys
    assert {"id", "amount_details", "metadata", "note", "tip"} <= r._PLAIN_KEYS
    card_key = {"4111 1111 1111 1111": "x"}  # dict keys are kept as they are, but never remembered
    assert r.redact_value(card_key) == r.redact_value(card_key) == card_key
    assert "4111 1111 1111 1111" not in r._PLAIN_KEYS


@pytest.mark.parametrize(("text", "masked"), [
    ("order-4242424242424242", "order-[card]"),  # was kept: a dash after a word was read as a digit separator
    ("4242424242424242-x", "[card]-x"),
    ("ref x-4242-4242-4242-4242.", "ref x-[card]."),
    ("order-4111 1111 1111 1111", "order-[card]"),
    # a longer grouped number is not a card, taken whole as before
    ("1234-5678-9012-3456-7890", "1234-5678-9012-3456-7890"),
    ("12-4242424242424242", "12-4242424242424242"),
    ("2026-12-01T09:30:00+00:00", "2026-12-01T09:30:00+00:00"),
])
def test_redact__a_card_number_next_to_a_word_and_a_dash_is_masked(text: str, masked: str) -> None:
    assert r.redact(text) == r._redact_all(text) == masked
    assert r.has_card_number(text) is (masked != text)


def test_grouped__recon_made_hex_with_a_luhn_valid_run_is_left_alone_where_dashes_would_not_be() -> None:
    plain = "4242424242424242" + "abcdef01" * 4  # Stripe's test Visa, then hex
    assert r.redact(plain) != plain  # why recon's own hex identifiers are never written plain
    assert r.grouped(plain) == "42424242.42424242.abcdef01.abcdef01.abcdef01.abcdef01"
    assert r.redact(r.grouped(plain)) == r.grouped(plain)
    dashed = "42424242-42424242-abcdef01"  # UUID-style groups: a dash is a card separator
    assert r.redact(dashed) != dashed
    digits = "".join(str(i % 10) for i in range(64))  # 64 decimal digits, grouped: no run reaches 13
    assert r.redact(r.grouped(digits)) == r.grouped(digits)


def test_redact_evidence__the_psps_identifiers_exactly_the_rest_redacted() -> None:
    # Adyen's own example reference, Luhn-valid in this variant (tests/integration/test_stored_text.py)
    ref, other, card = "8515208516304268", "8815208516304265", "4242424242424242"
    assert r.is_luhn_valid(ref) and r.is_luhn_valid(other)
    details = {"psp_reference": ref, "psp_status": f"declined {card}", "reason": f"card {card}",
               "psp_reference_conflict": {"ours": ref, "theirs": [other]}, "nested": {"psp_reference": card}}
    clean = r.redact_evidence(details)
    assert clean == {"psp_reference": ref, "psp_status": "declined [card]", "reason": "card [card]",
                     "psp_reference_conflict": {"ours": ref, "theirs": [other]},
                     "nested": {"psp_reference": "[card]"}}  # kept only where recon's evidence names it
    # a value that is no identifier under an identifier's key is redacted as any other
    assert r.redact_evidence({"psp_reference": {"x": {"y": card}}}) == {"psp_reference": {"x": {"y": "[card]"}}}
    assert r.redact_evidence(None) is None


def defined_redact_row(row: dict[object, object], keep: frozenset[object]) -> dict[object, object]:
    """``redact_row`` as its docstring defines it (the comprehension it was before its loop)."""
    return {k: v if k in keep or v is None or not isinstance(v, str | dict | list) else defined_redact_value(v)
            for k, v in row.items()}


def defined_redact_evidence(details: dict[object, object]) -> dict[object, object]:
    """``redact_evidence`` as its docstring defines it (the comprehension it was before its loop)."""
    return {k: v if k in r.EVIDENCE_IDENTIFIERS and r._identifiers(v) else defined_redact_value(v)
            for k, v in details.items()}


EVIDENCE_KEYS = [*KEYS, "psp_reference", "psp_reference_conflict", "raw_status", "webhook"]


@pytest.mark.parametrize("seed", range(3))
def test_redact_row_and_redact_evidence__their_loops_answer_as_the_definitions(seed: int) -> None:
    """Both take a plain string or number without a call (the audit rows of every webhook finish); the answers,
    and the types of what is not a string (a str subclass may come back as itself), are the definitions'."""
    rng = random.Random(seed)
    changed = kept = 0
    for _ in range(3_000):
        row = {rng.choice(EVIDENCE_KEYS): document(rng) for _ in range(rng.randint(1, 8))}
        keep = frozenset(rng.sample(EVIDENCE_KEYS, rng.randint(0, 3)))
        for got, want in ((r.redact_row(row, keep=keep), defined_redact_row(row, keep)),  # type: ignore[arg-type]
                          (r.redact_evidence(row), defined_redact_evidence(row))):  # type: ignore[arg-type]
            assert got == want, (row, keep)
            assert got is not None
            assert [type(v) for v in got.values() if not isinstance(v, str)] == [
                type(v) for v in want.values() if not isinstance(v, str)], row
            changed += got != row
        kept += any(k in keep and isinstance(v, str) and r.redact(v) != v for k, v in row.items())
    assert changed > 1_000 and kept > 5  # texts were redacted, and kept where the row names them


@pytest.mark.parametrize("key", ["pan", "PAN", "number", "card_number", "cardNumber", "card-number", "password",
                                 "api_key", "token", "secret", "cvc", "cvv2", "security_code", "client_secret"])
def test_redact_json__a_secret_named_key_is_masked_whatever_its_value_looks_like(key: str) -> None:
    # the value holds nothing any pattern would find: only the key's name says it is secret
    text = json.dumps({key: "x1", "nested": [{key: "y2"}], "kept": "z3"})
    assert json.loads(r.redact_json(text)) == {key: r.MASK, "nested": [{key: r.MASK}], "kept": "z3"}


def test_redact_json__a_document_without_secrets_is_returned_as_it_is() -> None:
    text = '{"payment_id": 12, "reference": "order-1", "numbers": [1, 2], "pane": "x"}'
    assert r.redact_json(text) is text


def test_redact_json__escapes_hide_nothing_from_the_quick_check() -> None:
    # every other digit of a card number, and a secret-named key, written as JSON escapes: the raw text holds
    # no 13-digit run and no key name, but the document does
    card = "".join(c if i % 2 == 0 else f"\\u{ord(c):04x}" for i, c in enumerate("4242424242424242"))
    assert json.loads(r.redact_json('{"note": "' + card + '", "kept": "z3"}')) == {"note": "[card]", "kept": "z3"}
    assert json.loads(r.redact_json('{"p\\u0061n": "abc"}')) == {"pan": r.MASK}
    text = '{"note": "line\\nbreak"}'  # an escape with nothing to mask: the same document back
    assert json.loads(r.redact_json(text)) == {"note": "line\nbreak"}
