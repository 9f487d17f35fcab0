"""The claim-token scheme proposed for version 5 (docs/design-v5.md §2),
raced with real sessions on the laboratory layout of bench/v5_layout.sql:
a token that retires, or is claimed by another session, while a claim with
the same token waits on the unique index, is refused with QF301 once the
other transaction ends; and the same check moved into the claiming
statement lets the token claim twice, which is why it is a later one."""

from __future__ import annotations

import psycopg
import pytest

from bench import v5_layout

pytestmark = pytest.mark.pg_server


@pytest.fixture
def lab(pg) -> str:
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute(v5_layout.LAB_SQL.read_text(encoding="utf-8"))
    return pg.url


def test_a_token_is_refused_whatever_its_other_use_does_meanwhile(lab: str) -> None:
    outcomes = v5_layout.race_token_retirement(lab)
    assert all(case["second_claim_waited"] for case in outcomes.values())
    assert {name: case["answer"] for name, case in outcomes.items()} == {
        "retire then commit": "QF301", "retire then rollback": "QF301",
        "claim then commit": "QF301", "claim then rollback": "claimed"}


def test_claims_refuse_a_transaction_snapshot(lab: str) -> None:
    assert v5_layout.repeatable_read_answer(lab) == "QF305"


def test_the_check_in_the_claiming_statement_lets_a_spent_token_claim_again(lab: str) -> None:
    with psycopg.connect(lab, autocommit=True) as conn:
        conn.execute(v5_layout.same_statement_variant())
    outcome = v5_layout.race_token_retirement(lab, (("retire", "commit"),))
    assert outcome == {"retire then commit": {"second_claim_waited": True, "answer": "claimed"}}
