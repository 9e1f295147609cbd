"""The Python peers of bench/peers and bench/mariadb-local: DuckDB and ADBC loading the
prepared TPC-H files.

    peers_python.py duckdb|adbc|duckdb-mysql URL PREPARED_DIR JOBS

(`duckdb-mysql` takes a MySQL connection string, `host=... port=... user=... database=...`.)

Each reads the stripped `.txt` copies (no trailing `|`) with the target tables' own column
types, so that each does its own typed conversion, as sluice does.
"""

import concurrent.futures
import glob
import os
import sys

TABLES = ["lineitem", "orders", "partsupp", "part", "customer", "supplier", "nation", "region"]


def files_of(prepared, table):
    # `lineitem.3.tbl.txt` (parts) and `nation.tbl.txt` (whole); `part.` never matches partsupp.
    return sorted(glob.glob(os.path.join(prepared, f"{table}.*.txt")))


def duckdb_load(url, prepared, jobs, kind="postgres"):
    """DuckDB's read_csv into the target through its `postgres` or `mysql` extension."""
    import importlib

    import duckdb

    ext = importlib.import_module(f"duckdb_extension_{kind}_scanner")
    path = glob.glob(os.path.join(os.path.dirname(ext.__file__), "extensions", "*",
                                  f"{kind}_scanner.duckdb_extension"))[0]
    con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    con.execute(f"LOAD '{path}'")
    con.execute(f"SET threads = {jobs}")
    con.execute(f"ATTACH '{url}' AS db (TYPE {kind})")
    schema = "db.public" if kind == "postgres" else "db"
    for t in TABLES:
        cols = con.execute(f"DESCRIBE {schema}.{t}").fetchall()
        types = ", ".join(f"'{name}': '{typ}'" for name, typ, *_ in cols)
        files = ", ".join(f"'{f}'" for f in files_of(prepared, t))
        con.execute(
            f"INSERT INTO {schema}.{t} SELECT * FROM read_csv([{files}], delim = '|', "
            f"header = false, quote = '', escape = '', columns = {{{types}}})")
    con.close()


def duckdb_mysql_load(url, prepared, jobs):
    duckdb_load(url, prepared, jobs, kind="mysql")


def adbc_load(url, prepared, jobs):
    import adbc_driver_postgresql.dbapi as pg
    import pyarrow as pa
    import pyarrow.csv as pc

    with pg.connect(url) as conn, conn.cursor() as cur:
        schemas = {}
        for t in TABLES:
            cur.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                f"WHERE attrelid = '{t}'::regclass AND attnum > 0 AND NOT attisdropped "
                "ORDER BY attnum")
            schemas[t] = cur.fetchall()

    def arrow_type(pg_type):
        if pg_type.startswith("numeric"):
            p, s = pg_type[len("numeric("):-1].split(",")
            return pa.decimal128(int(p), int(s))
        return {"integer": pa.int32(), "bigint": pa.int64(), "date": pa.date32()}.get(
            pg_type, pa.string())

    def one(path, table):
        cols = schemas[table]
        names = [c for c, _ in cols]
        data = pc.read_csv(
            path,
            read_options=pc.ReadOptions(column_names=names),
            parse_options=pc.ParseOptions(delimiter="|", quote_char=False),
            convert_options=pc.ConvertOptions(
                column_types={c: arrow_type(t) for c, t in cols}, strings_can_be_null=False))
        with pg.connect(url) as conn, conn.cursor() as cur:
            cur.adbc_ingest(table, data, mode="append")
            conn.commit()

    work = sorted(((f, t) for t in TABLES for f in files_of(prepared, t)),
                  key=lambda w: os.path.getsize(w[0]), reverse=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for fut in [pool.submit(one, f, t) for f, t in work]:
            fut.result()


if __name__ == "__main__":
    which, url, prepared, jobs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    {"duckdb": duckdb_load, "adbc": adbc_load, "duckdb-mysql": duckdb_mysql_load}[which](url, prepared, jobs)
