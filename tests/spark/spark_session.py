"""The test SparkSession's settings (shared/reference/spark.md §1), for the fixture and for
query processes the tests start and kill: `petrel.testing.spark_session.build_session` with
this directory's log4j2 file."""

from __future__ import annotations

from pathlib import Path

from petrel.testing.spark_session import build_session as _build

HERE = Path(__file__).resolve().parent


def build_session(scratch: Path, app: str = "petrel-tests"):
    return _build(scratch, app, log4j=HERE / "log4j2.properties")
