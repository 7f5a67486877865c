"""The store read without smlens, by DuckDB (a folder and S3) and Apache Spark (a folder, and an S3
store's objects copied as they are): the same per-phase, per-role kernel time as
`smlens views --format json`. The queries are docs/STORE.md's."""
from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
from tests.cli import smlens
from tests.conftest import DATA

CAPTURES = ("targeted_raw.csv", "decode12_raw.csv", "sections_raw.csv")  # three metric sets

# docs/STORE.md's queries, with the store's location and a run id filled in.
DUCKDB_QUERY = """
  SELECT phase, role, count(*) AS kernels, sum("gpu__time_duration.sum") AS time_ns
  FROM read_parquet('{store}/runs/*/kernels.parquet', hive_partitioning = true, union_by_name = true)
  WHERE run = '{run}' GROUP BY ALL"""
SPARK_QUERY = """
  SELECT phase, role, count(*) AS kernels, sum(`gpu__time_duration.sum`) AS time_ns
  FROM kernels WHERE run = '{run}' GROUP BY phase, role"""


def smlens_groups(store: str, run: str) -> dict:
    code, out, err = smlens("views", run, "--store", store, "--format", "json")
    assert code == 0, err
    return {(g["phase"], g["role"]): (g["kernels"], g["time_ns"]) for g in json.loads(out)["groups"]}


def ingest_all(store: str) -> list[str]:
    code, out, err = smlens("ingest", *[DATA / c for c in CAPTURES], "--store", store, "--format", "json")
    assert code == 0, err
    return [row["id"] for row in json.loads(out)]


def as_groups(rows) -> dict:
    return {(phase, role): (int(kernels), float(time_ns)) for phase, role, kernels, time_ns in rows}


@pytest.fixture(scope="module")
def folder_store(tmp_path_factory) -> tuple[str, list[str]]:
    store = str(tmp_path_factory.mktemp("engines") / "store")
    return store, ingest_all(store)


def test_duckdb_reads_a_folder_store(folder_store):
    duckdb = pytest.importorskip("duckdb")
    store, ids = folder_store
    for run in ids:
        expected = smlens_groups(store, run)
        got = as_groups(duckdb.sql(DUCKDB_QUERY.format(store=store, run=run)).fetchall())
        assert got == expected and len(expected) >= 5
    assert expected[("decode", "o_proj")][0] > 0


def test_duckdb_reads_an_s3_store(s3_store):
    duckdb = pytest.importorskip("duckdb")
    import s3fs

    ids = ingest_all(s3_store)
    connection = duckdb.connect()
    # DuckDB reads s3:// through fsspec here (its httpfs extension is downloaded at run time,
    # which CI cannot); the endpoint and keys come from the same AWS environment as smlens's
    connection.register_filesystem(s3fs.S3FileSystem(skip_instance_cache=True))
    for run in ids:
        got = as_groups(connection.sql(DUCKDB_QUERY.format(store=s3_store, run=run)).fetchall())
        assert got == smlens_groups(s3_store, run)
    total = connection.sql(f"SELECT count(*) FROM read_parquet('{s3_store}/runs/*/kernels.parquet')")
    assert total.fetchall() == [(188 + 12 + 188,)]


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark")
    if not shutil.which("java"):
        if os.environ.get("CI"):
            pytest.fail("no java on PATH: scripts/test.sh installs default-jre-headless as root")
        pytest.skip("Spark needs a Java runtime (apt-get install default-jre-headless)")
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (SparkSession.builder.master("local[1]").appName("smlens-store-test")
               .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "1").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture()
def s3_store_objects(s3_store, tmp_path) -> tuple[str, str, list[str]]:
    """An S3 store (its URL), its objects copied byte for byte to a folder, and its run ids. Spark
    reads s3a:// only with hadoop-aws on its class path, which comes from Maven, out of CI's reach;
    the copy is what it would read there."""
    import s3fs

    ids = ingest_all(s3_store)
    copy = tmp_path / "copy"
    s3fs.S3FileSystem(skip_instance_cache=True).get(f"{s3_store[len('s3://'):]}/", f"{copy}/",
                                                     recursive=True)
    assert (copy / "_log").is_dir() and not (copy / ".staging").exists()  # the S3 layout
    return s3_store, str(copy), ids


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["folder", "s3"])
def test_spark_reads_the_store(spark, kind, request):
    if kind == "folder":
        store, ids = request.getfixturevalue("folder_store")
        location = store
    else:
        store, location, ids = request.getfixturevalue("s3_store_objects")
    kernels = (spark.read.option("mergeSchema", "true").option("basePath", f"{location}/runs")
               .parquet(f"{location}/runs/*/kernels.parquet"))
    kernels.createOrReplaceTempView("kernels")
    for run in ids:
        rows = spark.sql(SPARK_QUERY.format(run=run)).collect()
        assert as_groups(rows) == smlens_groups(store, run)
    assert kernels.count() == 188 + 12 + 188
