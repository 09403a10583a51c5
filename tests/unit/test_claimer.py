"""The claimer's batching rule: half the pool at once, no free slot waiting past its patience."""

from __future__ import annotations

import pytest

from django_dbqueue.worker.claimer import ClaimPacing
from tests.manual_clock import ManualClock

POLL = 5.0


@pytest.fixture
def pacing(clock: ManualClock) -> ClaimPacing:
    return ClaimPacing(8, patience=0.5, clock=clock)


class TestClaimPacing:
    def test_an_idle_pool_claims_every_free_slot_at_once(self, pacing: ClaimPacing) -> None:
        assert pacing.wanted(8, busy=0) == 8

    def test_a_busy_pool_claims_once_half_its_slots_are_free(self, pacing: ClaimPacing) -> None:
        assert pacing.wanted(3, busy=5) == 0
        assert pacing.wanted(4, busy=4) == 4

    def test_fewer_free_slots_are_claimed_once_the_first_waited_its_patience(
        self, pacing: ClaimPacing, clock: ManualClock
    ) -> None:
        assert pacing.wanted(1, busy=7) == 0
        assert pacing.wait(POLL) == 0.5
        clock.now += 0.25
        assert pacing.wanted(2, busy=6) == 0
        assert pacing.wait(POLL) == 0.25
        clock.now += 0.25
        assert pacing.wanted(2, busy=6) == 2

    def test_a_full_claim_starts_the_patience_again(
        self, pacing: ClaimPacing, clock: ManualClock
    ) -> None:
        pacing.wanted(1, busy=7)
        clock.now += 0.5
        pacing.claimed(wanted=1, got=1)
        assert pacing.wanted(1, busy=7) == 0
        assert pacing.wait(POLL) == 0.5

    def test_slots_a_short_claim_left_free_are_claimed_without_more_patience(
        self, pacing: ClaimPacing, clock: ManualClock
    ) -> None:
        pacing.claimed(wanted=4, got=1)  # the queue ran dry: three slots stay free
        clock.now += 0.5
        assert pacing.wanted(3, busy=5) == 3  # a wake-up (a commit, say) finds them waiting

    def test_without_free_slots_it_waits_for_a_wake_up_or_the_poll(
        self, pacing: ClaimPacing, clock: ManualClock
    ) -> None:
        pacing.wanted(1, busy=7)
        clock.now += 1
        # No slot to fill (all busy, or --max-jobs spent): no patience to wait out, no spin.
        assert pacing.wanted(0, busy=8) == 0
        assert pacing.wait(POLL) == POLL
        assert pacing.wanted(-2, busy=8) == 0
        assert pacing.wait(POLL) == POLL

    def test_the_wait_never_goes_negative(self, pacing: ClaimPacing, clock: ManualClock) -> None:
        pacing.wanted(1, busy=7)
        clock.now += 1
        assert pacing.wait(POLL) == 0.0

    def test_the_first_free_slot_the_batch_and_the_last_wake_the_claimer(
        self, pacing: ClaimPacing
    ) -> None:
        assert [free for free in range(1, 9) if pacing.wakes(free)] == [1, 4, 8]

    def test_a_one_slot_pool_claims_its_slot_as_soon_as_it_frees(self, clock: ManualClock) -> None:
        pacing = ClaimPacing(1, clock=clock)
        assert pacing.batch == 1
        assert pacing.wanted(1, busy=0) == 1
