# Raw-socket cases against an HTTP/1.1 server (spec/functional/scripts/
# httpd_raw.lua serves them): each case opens its own connection(s), sends
# exact bytes and reads what comes back, with no HTTP library between.
# Prints one JSON object: case name -> what it saw.
#   python3 rawhttp.py PORT [all | name,name,...]
import json, socket, sys, threading, time

PORT = int(sys.argv[1])
WANT = sys.argv[2] if len(sys.argv) > 2 else "all"


def conn():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
    return s


def read_all(s, limit=10.0):
    """Everything until the server closes (or the time limit)."""
    s.settimeout(limit)
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except socket.timeout:
        data += b"<timeout>"
    except ConnectionResetError:
        data += b"<reset>"
    return data


def read_response(s):
    """One response: (status, headers dict, body bytes), or None at EOF."""
    s.settimeout(10)
    buf = getattr(s, "_buf", b"")
    while b"\r\n\r\n" not in buf:
        b = s.recv(65536)
        if not b:
            return None
        buf += b
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    body = b""
    if hdrs.get("transfer-encoding") == "chunked":
        while True:
            while b"\r\n" not in rest:
                rest += s.recv(65536)
            size_line, _, rest = rest.partition(b"\r\n")
            n = int(size_line, 16)
            while len(rest) < n + 2:
                rest += s.recv(65536)
            body += rest[:n]
            rest = rest[n + 2:]
            if n == 0:
                break
    else:
        n = int(hdrs.get("content-length", "0"))
        while len(rest) < n:
            rest += s.recv(65536)
        body, rest = rest[:n], rest[n:]
    s._buf = rest
    return status, hdrs, body


class Sock:
    def __init__(self):
        self.s = conn()
        self._buf = b""

    def send(self, b):
        self.s.sendall(b)

    def recv(self, n):
        return self.s.recv(n)

    def settimeout(self, t):
        self.s.settimeout(t)

    def response(self):
        r = read_response(self)
        if r is None:
            return None
        st, h, b = r
        try:
            body = json.loads(b)
        except Exception:
            body = b.decode("latin-1")
        return {"status": st, "headers": h, "body": body}

    def closed_after(self):
        """True when the server closed the connection with nothing more
        sent (EOF or a reset), False when it stays open for 10 s."""
        if self._buf:
            return False
        self.s.settimeout(10)
        try:
            return self.s.recv(65536) == b""
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True

    def close(self):
        self.s.close()


def one(raw, chunks=None, closes=True):
    """Send raw (or chunks with pauses), read one response and (closes:
    the server is expected to close) whether the server closed."""
    c = Sock()
    if chunks:
        for ch in chunks:
            c.send(ch)
            time.sleep(0.02)
    else:
        c.send(raw)
    r = c.response()
    closed = (c.closed_after() if closes else None) if r is not None else True
    c.close()
    return {"resp": r, "closed": closed}


GET = b"GET /hello?x=1 HTTP/1.1\r\nHost: t\r\nX-Mixed-Case: A b\r\n\r\n"
CASES = {}


def case(f):
    CASES[f.__name__] = f
    return f


@case
def get():
    c = Sock()
    c.send(GET)
    r = c.response()
    c.close()
    return r


@case
def post_length():
    return one(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello world", closes=False)


@case
def post_chunked():
    return one(None, [b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
                      b"5;ext=1\r\nhel", b"lo\r\n", b"6\r\n world\r\n", b"0\r\nX-Trailer: t\r\n\r\n"], closes=False)


@case
def keepalive():
    c = Sock()
    c.send(GET)
    a = c.response()
    c.send(b"POST /second HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nok")
    b = c.response()
    c.close()
    return [a, b]


@case
def pipelined():
    c = Sock()
    c.send(b"POST /one HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
           b"GET /two HTTP/1.1\r\nHost: t\r\n\r\n"
           b"POST /three HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n")
    out = [c.response(), c.response(), c.response()]
    c.close()
    return out


@case
def bare_lf():
    return one(b"\r\nGET /lf HTTP/1.1\nHost: t\n\n", closes=False)


@case
def malformed():
    out = {}
    bad = {
        "garbage": b"GARBAGE\r\n\r\n",
        "no_host": b"GET / HTTP/1.1\r\n\r\n",
        "space_in_target": b"GET /a b HTTP/1.1\r\nHost: t\r\n\r\n",
        "bad_header": b"GET / HTTP/1.1\r\nHost: t\r\nNo Colon Here\r\n\r\n",
        "space_before_colon": b"GET / HTTP/1.1\r\nHost : t\r\n\r\n",
        "obs_fold": b"GET / HTTP/1.1\r\nHost: t\r\nX: a\r\n  b\r\n\r\n",
        "ctl_in_value": b"GET / HTTP/1.1\r\nHost: t\r\nX: a\x01b\r\n\r\n",
        "cl_and_te": b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "two_lengths": b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "bad_length": b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n",
        "bad_chunk": b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
        "chunk_no_crlf": b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX0\r\n\r\n",
        "gzip": b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n",
        "http2": b"GET / HTTP/2.0\r\nHost: t\r\n\r\n",
        "lone_cr": b"GET / HTTP/1.1\r\nHost: t\rX: y\r\n\r\n",
    }
    for name, raw in bad.items():
        out[name] = one(raw)
    return out


@case
def limits():
    return {
        "head": one(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"),
        "head_unterminated": one(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 9000),
        "many_headers": one(b"GET / HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X%d: y\r\n" % i for i in range(200)) + b"\r\n"),
        "body": one(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n"),
        # the whole refused body sent at once: the server drains it after its
        # 413 rather than resetting the connection under the response
        "body_sent": one(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3000000\r\n\r\n" + b"a" * 3000000),
        "chunked_body": one(None, [b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"]
                            + [b"FFFFF\r\n" + b"a" * 0xFFFFF + b"\r\n"] * 2),
    }


@case
def http10():
    return one(b"GET /old HTTP/1.0\r\n\r\n")


@case
def conn_close():
    return one(b"GET /bye HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")


@case
def expect_continue():
    c = Sock()
    c.send(b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
    interim = read_response(c)
    c.send(b"data")
    r = c.response()
    c.close()
    return {"interim": interim and interim[0], "resp": r}


@case
def stream():
    return one(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n", closes=False)


@case
def drop_and_misuse():
    return {"drop": one(b"GET /drop HTTP/1.1\r\nHost: t\r\n\r\n"),
            "raise": one(b"GET /raise HTTP/1.1\r\nHost: t\r\n\r\n", closes=False),
            "twice": one(b"GET /twice HTTP/1.1\r\nHost: t\r\n\r\n", closes=False),
            "badheader": one(b"GET /badheader HTTP/1.1\r\nHost: t\r\n\r\n", closes=False)}


@case
def disconnect():
    c = Sock()
    c.send(b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n")
    time.sleep(0.2)
    c.close()
    time.sleep(0.3)
    d = Sock()
    d.send(b"GET /seen HTTP/1.1\r\nHost: t\r\n\r\n")
    r = d.response()
    d.close()
    return r


@case
def flood():
    c = Sock()
    c.send(b"GET /flood HTTP/1.1\r\nHost: t\r\n\r\n")
    deadline = time.time() + 60
    r = None
    while time.time() < deadline:
        time.sleep(0.5)
        d = Sock()
        d.send(b"GET /seen HTTP/1.1\r\nHost: t\r\n\r\n")
        r = d.response()
        d.close()
        if r["body"].get("flood_gone"):
            break
    c.close()
    return r


@case
def idle():
    """The server (idle_timeout_ms 1500) closes a silent connection, one
    whose head never ends, and a keep-alive one after its request; one that
    keeps sending in time stays."""
    silent, slow, used, busy = Sock(), Sock(), Sock(), Sock()
    slow.send(b"GET / HTTP/1.1\r\nHost: t\r\n")
    used.send(GET)
    first = used.response()["status"]
    busy.send(GET)
    busy.response()
    t0 = time.time()
    for _ in range(4):   # a request every 0.5 s keeps it open
        time.sleep(0.5)
        busy.send(GET)
        busy.response()
    out = {"first": first, "silent": silent.closed_after(), "slow": slow.closed_after(),
           "used": used.closed_after(), "busy_after": round(time.time() - t0, 1)}
    busy.send(GET)
    out["busy"] = busy.response()["status"]
    for c in (silent, slow, used, busy):
        c.close()
    return out


@case
def linger():
    """After refusing a body (413) the server drains what the client still
    sends, but not for ever: a client that keeps sending is cut off within
    its linger time (here idle_timeout_ms, 1.5 s)."""
    c = Sock()
    c.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000000\r\n\r\n" + b"a" * 65536)
    r = c.response()
    t0, sent, cut = time.time(), 0, False
    c.settimeout(1)
    while time.time() - t0 < 15:
        try:
            c.send(b"a" * 65536)
            sent += 65536
        except (BrokenPipeError, ConnectionResetError):
            cut = True
            break
        except socket.timeout:
            pass
    c.close()
    return {"status": r and r["status"], "cut": cut, "drained": sent, "after": round(time.time() - t0, 1)}


PIPE = (b"POST /one HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nab\r\nc"
        b"POST /two HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;x=y\r\nxyz\r\nA\r\n0123456789\r\n0\r\nT: 1\r\n\r\n"
        b"GET /three HTTP/1.1\r\nHost: t\r\n\r\n")


@case
def splits():
    """The same three pipelined requests cut at every byte, and at random
    places (seeded): the parser resumes anywhere, the bodies stay intact."""
    import random
    rnd = random.Random(7)
    cuts = [list(range(1, len(PIPE)))]
    for _ in range(15):
        cuts.append(sorted(rnd.sample(range(1, len(PIPE)), rnd.randint(1, 12))))
    seen = []
    for cut in cuts:
        c = Sock()
        c.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        last = 0
        for at in cut + [len(PIPE)]:
            c.send(PIPE[last:at])
            last = at
            time.sleep(0.001 if len(cut) > 20 else 0.01)
        got = [c.response(), c.response(), c.response()]
        c.close()
        seen.append([[g["body"]["path"], g["body"]["body"]] for g in got])
    return {"n": len(cuts), "distinct": [list(x) for x in {json.dumps(x): x for x in seen}.values()]}


@case
def many():
    results = [None] * 24

    def worker(i):
        try:
            c = Sock()
            got = []
            for k in range(3):
                body = b"%d-%d" % (i, k)
                c.send(b"POST /m HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                r = c.response()
                got.append([r["status"], r["body"]["body"], r["body"]["conn"]])
            c.close()
            results[i] = got
        except Exception as e:  # reported, not raised: the case shows it
            results[i] = repr(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(results))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def main():
    names = list(CASES) if WANT == "all" else WANT.split(",")
    out = {}
    for n in names:
        try:
            out[n] = CASES[n]()
        except Exception as e:
            out[n] = {"error": repr(e)}
    print(json.dumps(out))


main()
