"""What serving does about the remote store, from given probe results (no Redis, no clock)."""

from __future__ import annotations

from kvstack.hardware.snapshot import RemoteInfo
from kvstack.serving.remote_watch import HANG_GRACE_S, Outage, hangs

URL = "redis://:***@127.0.0.1:6390/0"
UP = RemoteInfo(url=URL, reachable=True, keys=3)
HUNG = RemoteInfo(url=URL, reachable=False, error="cannot connect: Timeout reading from socket")
GONE = RemoteInfo(url=URL, reachable=False, error="cannot connect: Error 111 connecting. Connection refused.")


def _feed(outage: Outage, probes: list[tuple[float, RemoteInfo]]) -> list[tuple[float, str | None, bool]]:
    return [(t, *outage.observe(info, t)) for t, info in probes]


def test_a_timeout_is_a_hang_a_refusal_is_not() -> None:
    assert hangs(HUNG) and not hangs(GONE) and not hangs(UP)
    assert hangs(RemoteInfo(url=URL, reachable=False, error="cannot connect: Timeout connecting to server"))


def test_a_hang_past_the_grace_window_drops_the_tier_once() -> None:
    out = _feed(Outage(), [(0, UP), (2, HUNG), (4, HUNG), (10, HUNG), (12, HUNG), (14, HUNG), (40, HUNG)])
    assert [drop for _, _, drop in out] == [False, False, False, False, True, False, False]
    assert out[0][1] is None
    warned = out[1][1]
    assert warned is not None and "not answering" in warned and f"within {HANG_GRACE_S:g} s" in warned
    dropped = out[4][1]
    assert (
        dropped is not None
        and "has not answered for 10 s" in dropped
        and "without the remote tier" in dropped
    )
    assert [m for _, m, _ in out[5:]] == [None, None]  # said once


def test_a_blip_shorter_than_the_grace_window_costs_nothing() -> None:
    out = _feed(Outage(), [(2, HUNG), (4, HUNG), (8, HUNG), (10, UP), (12, HUNG), (14, HUNG), (20, HUNG)])
    assert not any(drop for _, _, drop in out)  # the window starts again after an answer
    assert out[3][1] is not None and "reachable again: the remote tier can serve" in out[3][1]


def test_a_store_that_is_gone_is_only_reported() -> None:
    out = _feed(Outage(), [(2, GONE), (30, GONE), (600, GONE)])
    assert not any(drop for _, _, drop in out)  # LMCache reads a refused lookup as a miss: serving goes on
    message = out[0][1]
    assert message is not None and "recomputes" in message and "dropped" not in message


def test_after_the_drop_an_answer_says_how_to_get_the_tier_back_and_nothing_drops_again() -> None:
    outage = Outage(grace_s=5)
    out = _feed(outage, [(0, HUNG), (5, HUNG), (7, UP), (9, HUNG), (30, HUNG), (32, UP)])
    assert [drop for _, _, drop in out] == [False, True, False, False, False, False]
    back = out[2][1]
    assert back is not None and "stays off for this run" in back and "restart `kvstack serve`" in back
    again = out[3][1]
    assert again is not None and "off for this run" in again and "dropped" not in again
