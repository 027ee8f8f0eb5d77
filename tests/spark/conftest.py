"""One local SparkSession per pytest process, shared by every test of tests/spark.

Builder settings in spark_session.py (shared/reference/spark.md §1): local[2], no UI, 2
shuffle partitions, a small serial-GC driver, Spark's logging at error; workers run this
interpreter (PYSPARK_PYTHON), which has Petrel and pyarrow.

Every test module here says ``pytestmark = pytest.mark.spark``. Under ``make test`` (xdist,
``-n 2``) each worker that runs some of them starts its own SparkSession: xdist's
``--dist loadgroup`` would keep them on one worker, but xdist 3.8 groups by rewriting
``item._nodeid``, which pytest 9 no longer reads, so it has no effect here.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install petrel[spark])")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install petrel[spark])")

from petrel.testing.process import BrokerProcess  # noqa: E402
from spark_session import build_session  # noqa: E402


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    session = build_session(tmp_path_factory.mktemp("spark"))
    yield session
    session.stop()


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(settings: str = "", name: str = "b", **options) -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, settings=settings, **options)
        started.append(b)
        return b

    yield make
    for b in started:
        if b.proc is not None and b.proc.poll() is None:
            b.kill9()
