#!/usr/bin/env python3
"""Data for bench/types: the events table of issue 31 and one file per column type.

events.csv: id bigint, at timestamptz, n int, name text, amount numeric(12,2), ok bool,
score float8, key uuid; with NULLs, negative numbers, non-ASCII names and offsets.
events-odd.csv: the same with 1% odd values (leading spaces, infinity, NaN, a 9-digit
fraction). type-<name>.csv: `id int, v TYPE` for each type. Deterministic (seeded).
"""
import os
import random
import sys
import uuid

NAMES = ["Zürich", "東京", "São Paulo", "Berlin", "Kraków", "Chicago", "Αθήνα", "Lima"]


def event(r, i):
    ts = "2024-%02d-%02d %02d:%02d:%02d" % (
        1 + r.randrange(12), 1 + r.randrange(28), r.randrange(24), r.randrange(60), r.randrange(60))
    k = r.randrange(4)
    if k == 1:
        ts += ".%06d" % r.randrange(1000000)
    if k == 2:
        ts += "+00"
    if k == 3:
        ts += ".%03d+02:00" % r.randrange(1000)
    n = "" if r.randrange(10) == 0 else str(r.randrange(-1000000, 1000000))
    name = NAMES[r.randrange(len(NAMES))] if r.randrange(3) else "name%d" % r.randrange(100000)
    amount = "%d.%02d" % (r.randrange(-99999, 999999), r.randrange(100))
    ok = ["t", "f", "true", "false", ""][r.randrange(5)]
    score = repr(r.uniform(-1e6, 1e6)) if r.randrange(5) else "%.3f" % r.uniform(0, 100)
    key = str(uuid.UUID(int=r.getrandbits(128)))
    return [str(i), ts, n, name, amount, ok, score, key]


def odd(r, fields):
    c = r.randrange(4)
    if c == 0:
        fields[2] = "  " + (fields[2] or "7")
    elif c == 1:
        fields[1] = "infinity"
    elif c == 2:
        fields[6] = "NaN"
    else:
        fields[1] = "2024-05-05 10:00:00.123456789"
    return fields


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(",".join(row))
            f.write("\n")


def events(rows, odd_share, seed):
    r = random.Random(seed)
    for i in range(rows):
        fields = event(r, i)
        if odd_share and r.random() < odd_share:
            fields = odd(r, fields)
        yield fields


def csv_quote(s):
    return '"' + s.replace('"', '""') + '"'


TYPES = {
    "int2": ("int2", lambda r: str(r.randrange(-32768, 32768))),
    "int4": ("int4", lambda r: str(r.randrange(-2**31, 2**31))),
    "int8": ("int8", lambda r: str(r.randrange(-2**63, 2**63))),
    "float4": ("float4", lambda r: repr(r.uniform(-1e6, 1e6))[:9]),
    "float8": ("float8", lambda r: repr(r.uniform(-1e9, 1e9))),
    "bool": ("bool", lambda r: ["t", "f", "true", "false"][r.randrange(4)]),
    "date": ("date", lambda r: "20%02d-%02d-%02d" % (r.randrange(100), 1 + r.randrange(12), 1 + r.randrange(28))),
    "numeric": ("numeric(12,2)", lambda r: "%d.%02d" % (r.randrange(-99999, 999999), r.randrange(100))),
    "timestamp": ("timestamp", lambda r: "2024-%02d-%02d %02d:%02d:%02d.%06d" % (
        1 + r.randrange(12), 1 + r.randrange(28), r.randrange(24), r.randrange(60), r.randrange(60), r.randrange(10**6))),
    "timestamptz": ("timestamptz", lambda r: "2024-%02d-%02d %02d:%02d:%02d%s" % (
        1 + r.randrange(12), 1 + r.randrange(28), r.randrange(24), r.randrange(60), r.randrange(60),
        ["+00", "", ".5+02:00", "Z"][r.randrange(4)])),
    "time": ("time", lambda r: "%02d:%02d:%02d" % (r.randrange(24), r.randrange(60), r.randrange(60))),
    "uuid": ("uuid", lambda r: str(uuid.UUID(int=r.getrandbits(128)))),
    "bytea": ("bytea", lambda r: "\\x" + r.getrandbits(128).to_bytes(16, "big").hex()),
    "int-half-null": ("int4", lambda r: "" if r.randrange(2) else str(r.randrange(1000000))),
    "text-utf8": ("text", lambda r: NAMES[r.randrange(len(NAMES))] + str(r.randrange(1000))),
    "varchar40-utf8": ("varchar(40)", lambda r: NAMES[r.randrange(len(NAMES))] + str(r.randrange(1000))),
    "text-quoted": ("text", lambda r: csv_quote('say "hi", %d' % r.randrange(100000))),
    "text-ascii": ("text", lambda r: "name%d" % r.randrange(10**6)),
}


def main():
    out, rows = sys.argv[1], int(sys.argv[2])
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "events.csv"), events(rows, 0, 31))
    write(os.path.join(out, "events-odd.csv"), events(rows, 0.01, 31))
    with open(os.path.join(out, "types.tsv"), "w") as t:
        for name, (ty, gen) in TYPES.items():
            r = random.Random(name)
            write(os.path.join(out, "type-%s.csv" % name), ([str(i), gen(r)] for i in range(rows)))
            t.write("%s\t%s\n" % (name, ty))


if __name__ == "__main__":
    main()
