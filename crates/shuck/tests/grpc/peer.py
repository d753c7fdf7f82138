#!/usr/bin/env python3
"""gRPC peers for shuck's tests, made with grpcio (PyPI), with generic handlers over raw
bytes so that no generated code is needed.

  peer.py serve PORT NAME [--tls CERT KEY] [--events FILE] [--delay SECS]
      A server for the service test.Echo and grpc.health.v1.Health, printing "ready" once
      it listens. SIGTERM stops it with a grace period of 5 s (its GOAWAY); FILE gets one
      line per event the tests look for (a call cancelled, the deadline it was given);
      SECS: how long each Unary call takes (a slow server).
  peer.py client PORT CA OP [ARGS...]
      One operation through shuck (TLS, name localhost), its result as one JSON line; with
      CA "-", straight to a server in clear.
"""
import json
import signal
import sys
import threading
import time
import queue

import grpc

MAX = 64 * 1024 * 1024
OPTS = [("grpc.max_receive_message_length", MAX), ("grpc.max_send_message_length", MAX)]


def serve(port, name, tls, events, delay=0.0):
    from concurrent import futures
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    def note(line):
        if events:
            with open(events, "a") as f:
                f.write(line + "\n")

    inflight, lock = [0], threading.Lock()

    def unary(req, ctx):
        if delay:
            # A slow server notes how many of its calls are under way (maxconn's test).
            with lock:
                inflight[0] += 1
                note("inflight %d" % inflight[0])
            time.sleep(delay)
            with lock:
                inflight[0] -= 1
        return name.encode() + b":" + req

    def big(req, ctx):
        return req

    def server_stream(req, ctx):
        for i in range(int(req)):
            yield b"%d" % i

    def client_stream(it, ctx):
        msgs = list(it)
        return b"%d:%d" % (len(msgs), sum(len(m) for m in msgs))

    def bidi(it, ctx):
        for m in it:
            yield b"echo:" + m

    def sleep(req, ctx):
        note("deadline %s" % (ctx.time_remaining() is not None and ctx.time_remaining() < 1e6))
        done = threading.Event()
        ctx.add_callback(lambda: done.set())
        end = time.time() + float(req)
        while time.time() < end:
            if not ctx.is_active():
                note("cancelled")
                return b""
            time.sleep(0.02)
        return name.encode()

    def trailers(req, ctx):
        ctx.send_initial_metadata((("x-initial", "i1"),))
        ctx.set_trailing_metadata((("x-trailer", "t1"), ("x-bin-bin", b"\x00\x01")))
        return b"with trailers"

    def status(req, ctx):
        ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing: " + req.decode())

    def headers(req, ctx):
        md = dict(ctx.invocation_metadata())
        return json.dumps({k: v for k, v in md.items() if isinstance(v, str)}).encode()

    hs = health.HealthServicer()
    hs.set("test.Echo", health_pb2.HealthCheckResponse.SERVING)
    hs.set("", health_pb2.HealthCheckResponse.SERVING)

    def set_health(req, ctx):
        st = health_pb2.HealthCheckResponse.SERVING if req == b"serving" else health_pb2.HealthCheckResponse.NOT_SERVING
        hs.set("test.Echo", st)
        return b"ok"

    raw = dict(request_deserializer=None, response_serializer=None)
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, **raw),
        "Big": grpc.unary_unary_rpc_method_handler(big, **raw),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, **raw),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, **raw),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi, **raw),
        "Sleep": grpc.unary_unary_rpc_method_handler(sleep, **raw),
        "Trailers": grpc.unary_unary_rpc_method_handler(trailers, **raw),
        "Status": grpc.unary_unary_rpc_method_handler(status, **raw),
        "Headers": grpc.unary_unary_rpc_method_handler(headers, **raw),
        "SetHealth": grpc.unary_unary_rpc_method_handler(set_health, **raw),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64), options=OPTS)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", handlers),))
    health_pb2_grpc.add_HealthServicer_to_server(hs, server)
    addr = "127.0.0.1:%d" % port
    if tls:
        with open(tls[0], "rb") as f:
            cert = f.read()
        with open(tls[1], "rb") as f:
            key = f.read()
        server.add_secure_port(addr, grpc.ssl_server_credentials(((key, cert),)))
    else:
        server.add_insecure_port(addr)
    server.start()
    stopped = threading.Event()

    def term(*_):
        def stop():
            server.stop(grace=5).wait()
            stopped.set()
        threading.Thread(target=stop, daemon=True).start()

    signal.signal(signal.SIGTERM, term)
    print("ready", flush=True)
    while not stopped.wait(0.2):
        pass


def channel(port, ca):
    if ca == "-":  # straight to a server, in clear
        return grpc.insecure_channel("127.0.0.1:%d" % port, options=OPTS)
    with open(ca, "rb") as f:
        root = f.read()
    creds = grpc.ssl_channel_credentials(root_certificates=root)
    opts = OPTS + [("grpc.ssl_target_name_override", "localhost"), ("grpc.enable_retries", 0)]
    return grpc.secure_channel("127.0.0.1:%d" % port, creds, options=opts)


def outcome(fn):
    try:
        r = fn()
        return {"code": "OK", **r}
    except grpc.RpcError as e:
        return {"code": e.code().name, "details": e.details(),
                "trailing": {k: v for k, v in (e.trailing_metadata() or ()) if isinstance(v, str)}}


def client(port, ca, op, args):
    ch = channel(port, ca)
    m = lambda kind, name: getattr(ch, kind)("/test.Echo/" + name)
    if op == "unary":
        data = args[0].encode() if args else b"hi"
        timeout = float(args[1]) if len(args) > 1 else 10
        def f():
            r, call = m("unary_unary", "Unary").with_call(data, timeout=timeout)
            return {"reply": r.decode()}
        out = outcome(f)
    elif op == "headers":
        out = outcome(lambda: {"reply": json.loads(m("unary_unary", "Headers")(b"", timeout=10))})
    elif op == "trailers":
        def f():
            r, call = m("unary_unary", "Trailers").with_call(b"", timeout=10)
            return {"reply": r.decode(),
                    "initial": {k: (v if isinstance(v, str) else v.hex()) for k, v in call.initial_metadata()},
                    "trailing": {k: (v if isinstance(v, str) else v.hex()) for k, v in call.trailing_metadata()}}
        out = outcome(f)
    elif op == "status":
        out = outcome(lambda: {"reply": m("unary_unary", "Status")(b"x", timeout=10).decode()})
    elif op == "big":
        size = int(args[0])
        data = bytes((i * 7) & 0xFF for i in range(256)) * (size // 256)
        def f():
            r = m("unary_unary", "Big")(data, timeout=60)
            return {"same": r == data, "len": len(r)}
        out = outcome(f)
    elif op == "server_stream":
        out = outcome(lambda: {"reply": [x.decode() for x in m("unary_stream", "ServerStream")(args[0].encode(), timeout=10)]})
    elif op == "client_stream":
        out = outcome(lambda: {"reply": m("stream_unary", "ClientStream")(iter([a.encode() for a in args]), timeout=10).decode()})
    elif op == "bidi":
        # Each message goes only once the answer to the one before came back: both ways
        # are open at once, or this never ends.
        q = queue.Queue()
        msgs = [a.encode() for a in args]
        def gen():
            for i, x in enumerate(msgs):
                yield x
                if i + 1 < len(msgs):
                    q.get(timeout=10)
        def f():
            got = []
            for r in m("stream_stream", "Bidi")(gen(), timeout=20):
                got.append(r.decode())
                q.put(1)
            return {"reply": got}
        out = outcome(f)
    elif op == "deadline":
        out = outcome(lambda: {"reply": m("unary_unary", "Sleep")(args[0].encode(), timeout=float(args[1])).decode()})
    elif op == "cancel":
        fut = m("unary_unary", "Sleep").future(b"10", timeout=30)
        time.sleep(float(args[0]))
        fut.cancel()
        out = {"code": "CANCELLED" if fut.cancelled() else "NOT_CANCELLED"}
    elif op == "health":
        from grpc_health.v1 import health_pb2, health_pb2_grpc
        stub = health_pb2_grpc.HealthStub(ch)
        out = outcome(lambda: {"status": health_pb2.HealthCheckResponse.ServingStatus.Name(
            stub.Check(health_pb2.HealthCheckRequest(service=args[0]), timeout=10).status)})
    elif op == "set_health":
        out = outcome(lambda: {"reply": m("unary_unary", "SetHealth")(args[0].encode(), timeout=10).decode()})
    elif op == "users":
        # Unary calls for users u0..uN-1 (x-user), ROUNDS each: the server of each call.
        n, rounds = int(args[0]), int(args[1]) if len(args) > 1 else 1
        u = ch.unary_unary("/test.Echo/Unary")
        seen = {}
        for _ in range(rounds):
            for i in range(n):
                r = u(b"x", timeout=10, metadata=(("x-user", "u%d" % i),)).decode().split(":")[0]
                seen.setdefault("u%d" % i, []).append(r)
        out = {"servers": {k: sorted(set(v)) for k, v in seen.items()}}
    elif op == "load":
        # CALLS unary calls (or Sleep ones of SECS each: "sleep:SECS") over CONC threads,
        # each its own channel, [as USER]; the codes and the servers that answered, counted.
        calls, conc = int(args[0]), int(args[1])
        method = args[2] if len(args) > 2 else "unary"
        # USER: every call as that user (x-user), for a hash by that header.
        md = (("x-user", args[3]),) if len(args) > 3 else None
        codes, servers, lock = {}, {}, threading.Lock()
        left = [calls]
        def worker():
            c = channel(port, ca)
            u = c.unary_unary("/test.Echo/Unary")
            s = c.unary_unary("/test.Echo/Sleep")
            while True:
                with lock:
                    if left[0] == 0:
                        return
                    left[0] -= 1
                try:
                    if method.startswith("sleep:"):
                        r = s(method[6:].encode(), timeout=30, metadata=md).decode()
                    else:
                        r = u(b"x", timeout=30, metadata=md).decode().split(":")[0]
                    k = "OK"
                except grpc.RpcError as e:
                    k, r = e.code().name, None
                with lock:
                    codes[k] = codes.get(k, 0) + 1
                    if r:
                        servers[r] = servers.get(r, 0) + 1
        ts = [threading.Thread(target=worker) for _ in range(conc)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out = {"codes": codes, "servers": servers}
    else:
        raise SystemExit("unknown op " + op)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "serve":
        tls = events = None
        delay = 0.0
        rest = a[3:]
        while rest:
            if rest[0] == "--tls":
                tls, rest = (rest[1], rest[2]), rest[3:]
            elif rest[0] == "--events":
                events, rest = rest[1], rest[2:]
            elif rest[0] == "--delay":
                delay, rest = float(rest[1]), rest[2:]
            else:
                raise SystemExit("unknown argument " + rest[0])
        serve(int(a[1]), a[2], tls, events, delay)
    else:
        client(int(a[1]), a[2], a[3], a[4:])
