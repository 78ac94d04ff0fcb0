"""The order the peers benchmark runs its peers in, round by round (`benchmarks.peers.round_order`)."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

from benchmarks.peers.__main__ import round_order


def test_rounds_alternate_the_order_so_that_no_peer_always_runs_first_or_after_the_same_one():
    peers = ["eos", "kstreams", "eos-cache", "kstreams-cache"]
    assert round_order(peers, 1) == peers
    assert round_order(peers, 2) == ["kstreams-cache", "eos-cache", "kstreams", "eos"]
    assert round_order(peers, 3) == peers
    assert peers == ["eos", "kstreams", "eos-cache", "kstreams-cache"]  # the caller's list is left alone
    # over an even number of rounds every peer of a pair runs first as often as the other, and each pair of
    # peers runs back to back in both orders
    firsts = Counter(round_order(["eos", "kstreams"], rnd)[0] for rnd in range(1, 5))
    assert firsts == {"eos": 2, "kstreams": 2}
    follows = Counter(pair for rnd in range(1, 5) for pair in pairwise(round_order(peers, rnd)))
    assert all(follows[(a, b)] == follows[(b, a)] == 2 for a, b in pairwise(peers))
    # uncounted warm-up rounds (0, -1, ...) take their turns the same way
    assert round_order(peers, 0) == round_order(peers, 2) and round_order(peers, -1) == peers
