# Before/after figures for issue 46: one watchfire binary (argv[1]) on a fresh config.
import json, os, signal, subprocess, sys, tempfile, time, urllib.request, urllib.parse, socket, threading

binary = sys.argv[1]
what = sys.argv[2:]
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
port = free_port()
d = tempfile.mkdtemp()
# GC=20s: resolved alerts collected every 20 s (alerts_gc_interval), to see RSS after a collection.
gc_every = os.environ.get("GC")
gc = f"alerts_gc_interval: {gc_every}\n" if gc_every else ""
open(f"{d}/rules.yaml", "w").write("groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Always\n        expr: vector(1)\n")
open(f"{d}/routes.yaml", "w").write("route:\n  receiver: quiet\nreceivers:\n  - name: quiet\n")
open(f"{d}/watchfire.yaml", "w").write(f"sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nevaluation_interval: 1s\nstate_dir: state\n{gc}http:\n  listen: '127.0.0.1:{port}'\n  bearer_token_env: TOK\n")
p = subprocess.Popen([binary, "run", "--config", f"{d}/watchfire.yaml"], env={**os.environ, "TOK": "t"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
base = f"http://127.0.0.1:{port}"
def req(path, data=None, method=None, headers=None, timeout=300):
    r = urllib.request.Request(base + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(r, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except Exception as e:
        return None, str(e).encode()
for _ in range(300):
    if req("/-/ready")[0] == 200: break
    time.sleep(0.1)
def rss():
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1]) // 1024
def query(q, extra=None, path="/api/v1/query"):
    body = urllib.parse.urlencode({"query": q, **(extra or {})}).encode()
    t = time.time()
    s, b = req(path, body, headers={"content-type": "application/x-www-form-urlencoded"})
    return s, time.time() - t, b[:160]
J = {"content-type": "application/json", "authorization": "Bearer t"}
if "deep" in what:
    for name, q in [("5000 terms", "+".join(["1"] * 5000)), ("abs( x2000", "abs(" * 2000 + "1" + ")" * 2000),
                    ("20000 minus", "-" * 20000 + "1"), ("sum( x20000", "sum(" * 20000 + "x" + ")" * 20000)]:
        s, t, b = query(q)
        alive = p.poll() is None
        print(f"deep {name}: status {s} in {t:.2f}s, process alive {alive}: {b[:100]!r}")
        if not alive: break
if "invalid" in what:
    alts = "|".join(f"v{k}" for k in range(3600))
    q = f'x{{a=~"{alts}"}} y'
    s, t, b = query(q, {"timeout": "2s"})
    print(f"invalid {len(q)} B, timeout=2s: status {s} in {t:.2f}s")
    t0 = time.time()
    while time.time() - t0 < 300:
        s2, t2, b2 = query("vector(1)", {"timeout": "1s"})
        if s2 == 200: break
        time.sleep(0.5)
    print(f"  a slot served again {time.time()-t0+t:.1f}s after the invalid query was sent (status {s2})")
    q2 = 'x{a=~"' + "(a|" * 60 + '"} +'
    s, t, b = query(q2 * 8, {"timeout": "2s"})
    print(f"invalid {len(q2*8)} B regex: status {s} in {t:.2f}s")
if "alerts" in what:
    n = int(os.environ.get("ALERTS", "20000")); nsil = int(os.environ.get("SILENCES", "1000"))
    r0 = rss()
    for b in range(0, n, 1000):
        al = [{"labels": {"alertname": "Gone", "i": str(b + i)}, "startsAt": "2020-01-01T00:00:00Z", "endsAt": "2020-01-01T01:00:00Z"} for i in range(1000)]
        req("/api/v2/alerts", json.dumps(al).encode(), headers=J)
    al = [{"labels": {"alertname": "Live", "i": str(i)}, "startsAt": "2020-01-01T00:00:00Z"} for i in range(2)]
    req("/api/v2/alerts", json.dumps(al).encode(), headers=J)
    t = time.time()
    for i in range(nsil):
        sil = {"matchers": [{"name": "alertname", "value": "Live", "isRegex": False, "isEqual": True}, {"name": "i", "value": f"s{i}", "isRegex": False, "isEqual": True}],
               "startsAt": "2020-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z", "createdBy": "m", "comment": "m"}
        s, _ = req("/api/v2/silences", json.dumps(sil).encode(), headers=J)
        assert s == 200, s
        if i + 1 in (1000, 3000, 5000, 10000, 20000):
            print(f"silences: {i+1} created in {time.time()-t:.1f}s")
    ts = []
    for _ in range(3):
        t = time.time(); s, b = req("/api/v2/alerts"); ts.append(time.time() - t)
    print(f"{n} resolved alerts + {nsil} silences: GET /api/v2/alerts -> {s}, {len(json.loads(b))} alerts, {min(ts)*1000:.0f}-{max(ts)*1000:.0f} ms; RSS {r0} -> {rss()} MB")
    t = time.time(); s, b = req("/-/ready"); print(f"  /-/ready {s} in {(time.time()-t)*1000:.0f} ms")
    if gc_every:
        # Resolved alerts leave the store at a GC after their group flushed (group_interval 5m):
        # WAIT=400 covers both.
        secs = float(os.environ.get("WAIT", float(gc_every.rstrip("s")) + 2))
        time.sleep(secs)
        ts = []
        for _ in range(3):
            t = time.time(); s, b = req("/api/v2/alerts"); ts.append(time.time() - t)
        print(f"  {secs:.0f} s later (GC every {gc_every}): GET /api/v2/alerts -> {s}, {len(json.loads(b))} alerts, {min(ts)*1000:.0f}-{max(ts)*1000:.0f} ms; RSS {rss()} MB")
if "term" in what:
    th = [threading.Thread(target=query, args=("count_over_time((vector(1) + vector(2))[1h:1s])", {"start": "0", "end": "165000", "step": "15"}, "/api/v1/query_range")) for _ in range(4)]
    for x in th: x.start()
    time.sleep(1.5)
    t = time.time(); p.send_signal(signal.SIGTERM)
    try:
        p.wait(60); print(f"SIGTERM with 4 range queries running: exited {p.returncode} after {time.time()-t:.1f}s")
    except subprocess.TimeoutExpired:
        print("SIGTERM: still running after 60 s")
p.kill(); p.wait()
