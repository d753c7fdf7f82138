#!/usr/bin/env python3
"""Hostile HTTP/3 clients for shuck's flood test, on aioquic. One mode per process, each
bounded by --seconds and paced by --rate (operations a second), then one JSON report:

  resets  streams opened and reset at once, on connection after connection (each ends
          when the server closes it for too many resets)
  tokens  new connections' first Initials, each with a forged address-validation token
          (the count of Retries and of Initials answered is reported)
  tiny    connections that ask for large answers on many streams with tiny flow-control
          windows they never open further (a slow-read client)
"""
import argparse
import asyncio
import json
import os
import socket
import ssl
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import StreamReset


class Quiet(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.reset_by_server = set()

    def quic_event_received(self, event):
        if isinstance(event, StreamReset):
            self.reset_by_server.add(event.stream_id)
        try:
            self.http.handle_event(event)
        except Exception:
            pass


def config(args, window=None):
    c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    c.verify_mode = ssl.CERT_NONE
    c.server_name = "localhost"
    c.idle_timeout = 5
    if window:
        c.max_stream_data = window
        c.max_data = window * 4
    return c


def head(args, path):
    return [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"localhost"),
        (b":path", path.encode()),
    ]


async def resets(args, end, out):
    out.update(connections=0, resets=0, closed_by_server=0, close_codes=[])
    pause = 1.0 / args.rate
    while time.monotonic() < end:
        out["connections"] += 1
        try:
            async with connect(args.host, args.port, configuration=config(args),
                               create_protocol=Quiet) as c:
                while time.monotonic() < end and c._quic._close_event is None:
                    sid = c._quic.get_next_available_stream_id()
                    c.http.send_headers(sid, head(args, "/size/1000000"), end_stream=True)
                    c._quic.reset_stream(sid, 0x10C)
                    c.transmit()
                    out["resets"] += 1
                    await asyncio.sleep(pause)
                ev = c._quic._close_event
                if ev is not None:
                    out["closed_by_server"] += 1
                    if len(out["close_codes"]) < 10:
                        out["close_codes"].append(ev.error_code)
        except Exception as e:
            out.setdefault("errors", []).append(repr(e)[:100])
            await asyncio.sleep(0.1)


async def tokens(args, end, out):
    # Each new connection is one client Initial (aioquic builds it, token and all) sent from
    # one UDP socket, and nothing more: a handshake per connection would cost this client
    # more CPU than a loaded 2-core machine gives it at the rate asked for. Sent on a clock
    # (a late one is sent at once), so the rate holds over the run.
    out.update(connections=0, retries=0, handshakes=0)
    addr = (args.host, args.port)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    pause = 1.0 / args.rate
    due = time.monotonic()

    def drain():
        while True:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                return
            # A long header's type bits (QUIC v1): 3 is a Retry, 0 an Initial.
            if data and data[0] & 0x80:
                kind = (data[0] >> 4) & 3
                if kind == 3:
                    out["retries"] += 1
                elif kind == 0:
                    out["handshakes"] += 1

    while time.monotonic() < end:
        c = config(args)
        c.token = os.urandom(96)
        quic = QuicConnection(configuration=c)
        quic.connect(addr, now=time.time())
        for data, _ in quic.datagrams_to_send(now=time.time()):
            sock.sendto(data, addr)
        out["connections"] += 1
        drain()
        due += pause
        await asyncio.sleep(max(0.0, due - time.monotonic()))
    await asyncio.sleep(0.5)
    drain()
    sock.close()


async def tiny(args, end, out):
    # The windows never grow: aioquic would open them as the answers are read.
    QuicConnection._write_connection_limits = lambda *a, **k: None
    QuicConnection._write_stream_limits = lambda *a, **k: None
    out.update(connections=0, streams=0, reset_by_server=0)

    async def one():
        async with connect(args.host, args.port, configuration=config(args, window=1024),
                           create_protocol=Quiet) as c:
            for _ in range(args.streams):
                sid = c._quic.get_next_available_stream_id()
                c.http.send_headers(sid, head(args, "/size/50000000"), end_stream=True)
                out["streams"] += 1
            c.transmit()
            # Stay past the flood until the server has reset every stream (a connection
            # that began late under load would otherwise leave before its stall timeout).
            while time.monotonic() < end or (
                len(c.reset_by_server) < args.streams and time.monotonic() < end + 8
            ):
                await asyncio.sleep(0.2)
            out["reset_by_server"] += len(c.reset_by_server)

    tasks = []
    for _ in range(args.connections):
        out["connections"] += 1
        tasks.append(asyncio.ensure_future(one()))
        await asyncio.sleep(1.0 / args.rate)
    await asyncio.gather(*tasks, return_exceptions=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["resets", "tokens", "tiny"])
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--rate", type=float, default=100)
    p.add_argument("--connections", type=int, default=20)
    p.add_argument("--streams", type=int, default=10)
    args = p.parse_args()
    out = {"mode": args.mode}
    end = time.monotonic() + args.seconds
    run = {"resets": resets, "tokens": tokens, "tiny": tiny}[args.mode]
    try:
        asyncio.run(asyncio.wait_for(run(args, end, out), args.seconds + 10))
    except Exception as e:
        out["error"] = repr(e)[:200]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
