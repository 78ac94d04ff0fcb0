"""`python -m benchmarks.wide_transactions`: its arguments."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("argv, says", [(["--partitions", "4,x"], "whole numbers separated by commas, not '4,x'"),
                                        (["--transactions", "3"], "--transactions at least 4"),
                                        (["--partitions", "0"], "partition counts and --rounds must be at least 1")])
def test_wide_transactions_refuses_bad_arguments_before_starting_a_broker(monkeypatch, capsys, argv, says):
    from benchmarks import wide_transactions

    started: list[object] = []
    monkeypatch.setattr(wide_transactions, "LocalCluster", lambda *a, **k: started.append(a))
    monkeypatch.setattr("sys.argv", ["wide_transactions", *argv])
    with pytest.raises(SystemExit) as exited:
        wide_transactions.main()
    assert exited.value.code == 2 and says in capsys.readouterr().err and not started
