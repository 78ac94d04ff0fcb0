"""`python -m benchmarks.startup`: its arguments, and what its dlq-exists variant makes before a launch."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("argv, says", [(["--partitions", "0"], "--partitions takes a count of at least 1"),
                                        (["--settle", "-1"], "--settle seconds of at least 0"),
                                        (["--variants", "shipped,nope"], "variants are shipped,")])
def test_startup_refuses_bad_arguments_before_starting_a_broker(monkeypatch, capsys, argv, says):
    from benchmarks import startup

    started: list[object] = []
    monkeypatch.setattr(startup, "provide_kafka", lambda *a, **k: started.append(a))
    with pytest.raises(SystemExit) as exited:
        startup.main(argv)
    assert exited.value.code == 2 and says in capsys.readouterr().err and not started


class _Admin:
    def __init__(self) -> None:
        self.created: list[tuple[str, int]] = []

    def create_topics(self, specs):
        self.created += [(s.name, s.partitions) for s in specs]

    def topic_partitions(self, topic):
        return [(topic, 0)]

    def group_offsets(self, group, tps, stable=False):
        return dict.fromkeys(tps, 1)  # (committed at once: the launch returns its first poll)


@pytest.mark.parametrize("variant", ["shipped", "dlq-exists"])
def test_the_dlq_exists_variant_makes_the_applications_dead_letter_topic_with_the_jobs_partitions(monkeypatch,
                                                                                                   tmp_path, variant):
    from contextlib import contextmanager

    from benchmarks import startup

    launches: list[dict[str, str]] = []

    @contextmanager
    def launched(cmd, env, scratch):
        launches.append(env)
        yield type("Proc", (), {"poll": lambda self: None})()

    monkeypatch.setattr(startup, "launched", launched)
    monkeypatch.setattr(startup.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    admin = _Admin()
    startup.first_commit("127.0.0.1:1", admin, "in", variant, "stateless", partitions=64)  # type: ignore[arg-type]
    (env,) = launches
    dlq = [(f"{env['PEER_APP']}-dlq", 64)] if variant == "dlq-exists" else []
    assert admin.created == [*dlq, (env["PEER_OUTPUT"], 64)]
