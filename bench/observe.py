"""Where a load's time goes, seen from the machine and the server while it runs.

    observe.py URL LABEL OUT_FILE        (prints "ready", then runs until its standard input closes)

bench/peers --observe 1 starts it beside each timed contender. Wall time alone cannot say why
a load grows faster than its data (the issue-9 question: at SF10 the WAL paths took 13 to 14
times SF1's time for 10 times the rows). It reads, before and after (or every 0.2 s, for the
peaks and the waits):
- the machine's CPU split (/proc/stat: user, system, iowait, idle);
- the server's own CPU: the postmaster and every child (backends, checkpointer, WAL writer),
  exited backends included through the postmaster's reaped-children time;
- the kernel threads' CPU (kswapd reclaiming, kworkers writing back): the rest is the client;
- the page cache's dirty and writeback pages (/proc/meminfo), and reclaim (/proc/vmstat);
- the disk's bytes written and the time it had a write in flight (/proc/diskstats);
- what each active client backend waits on (pg_stat_activity; "CPU" when it waits on nothing),
  through one psql session, so that sampling does not fork a process each time;
- the server's checkpoints and who wrote its buffers (pg_stat_bgwriter).
On EOF it appends one JSON line to OUT_FILE: the deltas, the peaks and the wait histogram.
"""

import collections
import json
import os
import subprocess
import sys
import threading
import time

INTERVAL = 0.2
PSQL = os.environ.get("PSQL", "psql")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_times():
    # user nice system idle iowait irq softirq steal
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return {"user": f[0] + f[1], "system": f[2] + f[5] + f[6], "idle": f[3], "iowait": f[4], "steal": f[7]}


def disks():
    # Whole devices only (no partitions): vda, sda, nvme0n1.
    out = collections.Counter()
    for line in open("/proc/diskstats"):
        f = line.split()
        name = f[2]
        if not os.path.exists(f"/sys/block/{name}") or name.startswith(("loop", "ram", "dm-")):
            continue
        out["read_bytes"] += int(f[5]) * 512
        out["written_bytes"] += int(f[9]) * 512
        out["write_ms"] += int(f[10])
        out["busy_ms"] += int(f[12])
    return out


def meminfo():
    m = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        m[k] = int(v.split()[0]) * 1024
    return m


def vmstat():
    keep = ("pgsteal_kswapd", "pgsteal_direct", "pgscan_direct", "allocstall_normal", "allocstall_movable")
    out = {}
    for line in open("/proc/vmstat"):
        k, v = line.split()
        if k in keep:
            out[k] = int(v)
    return out


def proc_cpu(pid):
    """(parent pid, own CPU seconds, CPU seconds of the children it has reaped)."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[1]), (int(f[11]) + int(f[12])) / TICK, (int(f[13]) + int(f[14])) / TICK
    except (OSError, IndexError):
        return None


def cpu_readings(postmaster):
    """One pass over /proc: the server's CPU so far, and each kernel thread's.

    The server's is the postmaster's own and its reaped children's, with every live child's
    (pid -> seconds): a backend that exits is reaped by the postmaster, so its whole life moves
    into the postmaster's children's time, and nothing it did is lost between readings. The
    kernel threads are the children of kthreadd (pid 2): page reclaim (kswapd) and writeback
    (kworker) run there, not in the processes that dirtied the pages."""
    _, own, reaped = proc_cpu(postmaster)
    live, kernel = {}, {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            r = proc_cpu(int(name))
            if r and r[0] == postmaster:
                live[int(name)] = r[1]
            elif r and r[0] == 2:
                kernel[int(name)] = r[1]
    return (own + reaped, live), kernel


def psql(url, sql):
    return subprocess.run([PSQL, "-X", "-At", "-d", url, "-c", sql], check=True,
                          capture_output=True, text=True).stdout.strip()


BGWRITER = ("checkpoints_timed", "checkpoints_req", "buffers_checkpoint", "buffers_clean",
            "buffers_backend", "buffers_backend_fsync")


def bgwriter(url):
    return dict(zip(BGWRITER, map(int, psql(url, f"SELECT {', '.join(BGWRITER)} FROM pg_stat_bgwriter").split("|"))))


def main():
    url, label, out = sys.argv[1:4]
    # The checkpointer lives as long as the server; its parent is the postmaster.
    pid = int(psql(url, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"))
    postmaster = proc_cpu(pid)[0]
    before = (time.time(), cpu_times(), disks(), vmstat(), bgwriter(url))
    server0, kernel0 = cpu_readings(postmaster)

    # One psql session answers a wait-event query per line written to it.
    query = ("SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity "
             "WHERE backend_type = 'client backend' AND state = 'active' AND pid <> pg_backend_pid();\n")
    sampler = subprocess.Popen([PSQL, "-X", "-At", "-q", "-d", url], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, bufsize=1)
    waits = collections.Counter()
    lines = collections.deque()
    threading.Thread(target=lambda: lines.extend(sampler.stdout), daemon=True).start()
    peaks = collections.Counter()
    stop = threading.Event()

    def sample():
        while not stop.wait(INTERVAL):
            m = meminfo()
            for k in ("Dirty", "Writeback"):
                peaks[k] = max(peaks[k], m[k])
            peaks["MinMemFree"] = min(peaks["MinMemFree"] or m["MemFree"], m["MemFree"])
            try:
                sampler.stdin.write(query)
            except OSError:   # the server went away: the run has failed, its caller says why
                return

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    print("ready", flush=True)
    sys.stdin.read()
    stop.set()
    t.join()
    try:
        sampler.stdin.close()
    except OSError:
        pass
    sampler.wait(timeout=10)
    time.sleep(0.1)
    for w in lines:
        waits[w.strip()] += 1
    server1, kernel1 = cpu_readings(postmaster)
    kernel = sum(v - kernel0.get(p, 0.0) for p, v in kernel1.items())
    after = (time.time(), cpu_times(), disks(), vmstat(), bgwriter(url))

    wall = after[0] - before[0]
    c = {k: (after[1][k] - before[1][k]) / TICK for k in before[1]}
    total = sum(c.values())
    # Children alive at the end count from the start (or their birth); children alive at the
    # start that have exited are in the postmaster's reaped time, less what they had used
    # before the start.
    live0, live1 = server0[1], server1[1]
    server = (server1[0] - server0[0]) + sum(v - live0.get(p, 0.0) for p, v in live1.items()) \
        - sum(v for p, v in live0.items() if p not in live1)
    record = {
        "label": label,
        "wall_s": round(wall, 2),
        "cpu_s": {k: round(v, 2) for k, v in c.items()},
        "busy_share": round((c["user"] + c["system"]) / total, 3) if total else 0,
        "server_cpu_s": round(server, 2),
        "kernel_threads_cpu_s": round(kernel, 2),
        "other_cpu_s": round(c["user"] + c["system"] - server - kernel, 2),
        "disk": {k: after[2][k] - before[2][k] for k in before[2]},
        "vm": {k: after[3][k] - before[3][k] for k in before[3]},
        "bgwriter": {k: after[4][k] - before[4][k] for k in before[4]},
        "peak_dirty_bytes": peaks["Dirty"],
        "peak_writeback_bytes": peaks["Writeback"],
        "min_free_bytes": peaks["MinMemFree"],
        "waits": dict(waits.most_common()),
    }
    with open(out, "a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
