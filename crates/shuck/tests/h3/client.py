#!/usr/bin/env python3
"""HTTP/3 client for shuck's tests, on aioquic (a real QUIC and HTTP/3 stack).

Prints one JSON object: per request its status, headers, body length and SHA-256, trailers,
and whether it was reset; plus the connection's facts (ALPN, resumed). Requests are given as
JSON on the command line (see main). Exit 0 once every request ended one way or another.
"""
import argparse
import asyncio
import hashlib
import json
import os
import socket
import ssl
import sys
import time

import contextlib
import functools

from aioquic.asyncio.client import connect
from aioquic.quic.connection import QuicConnection
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent, StreamReset
from aioquic import tls
from aioquic.tls import SessionTicket


# aioquic checks a response's content-length against its DATA even for HEAD, whose answer
# has none (RFC 9110 §9.3.2 lets Content-Length tell the GET's size): not for HEAD streams.
HEAD_STREAMS = set()
_check = H3Connection._check_content_length


def _check_unless_head(self, stream):
    if stream.stream_id not in HEAD_STREAMS:
        _check(self, stream)


H3Connection._check_content_length = _check_unless_head


class Result:
    def __init__(self):
        self.status = None
        self.headers = []
        self.trailers = []
        self.length = 0
        self.sha = hashlib.sha256()
        self.reset = None
        self.done = asyncio.get_event_loop().create_future()
        self.started = time.monotonic()
        self.ms = None

    def finish(self):
        if not self.done.done():
            self.ms = (time.monotonic() - self.started) * 1000
            self.done.set_result(None)

    def json(self):
        return {
            "status": self.status,
            "headers": self.headers,
            "trailers": self.trailers,
            "length": self.length,
            "sha256": self.sha.hexdigest(),
            "reset": self.reset,
            "ms": self.ms,
        }


class Counting:
    """A datagram transport that counts the bytes sent through it."""

    def __init__(self, inner):
        self.inner = inner

    def sendto(self, data, addr=None):
        Client.rebound["sent"] += len(data)
        self.inner.sendto(data, addr)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Rebound(asyncio.DatagramProtocol):
    """The new socket's own protocol after a rebind: it records each datagram that socket
    receives, with what the client had sent from it by then, and hands it to the client.
    The client never takes the socket itself (connection_made), so nothing leaves it
    uncounted, and what the old socket still receives is not counted as the new one's."""

    def __init__(self, client):
        self.client = client

    def datagram_received(self, data, addr):
        Client.rebound["received"].append([len(data), Client.rebound["sent"]])
        self.client.datagram_received(data, addr)


class Client(QuicConnectionProtocol):
    # --hold-finished: seconds the client's handshake end (its Finished) is held back, as
    # a slow uplink would, so that its 0-RTT requests surely reach the server first.
    hold_finished = 0.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.results = {}
        self._hold_until = None

    largest_datagram = 0
    # After a rebind: the datagrams received on the new address, each with the bytes the
    # client had sent from it when it came (the server's anti-amplification limit).
    rebound = None

    def datagram_received(self, data, addr):
        Client.largest_datagram = max(Client.largest_datagram, len(data))
        super().datagram_received(data, addr)

    def transmit(self):
        if self.hold_finished and self._quic._handshake_complete:
            now = self._loop.time()
            if self._hold_until is None:
                self._hold_until = now + self.hold_finished
            if now < self._hold_until:
                self._loop.call_at(self._hold_until, self.transmit)
                return
        super().transmit()

    def quic_event_received(self, event: QuicEvent):
        if isinstance(event, StreamReset) and event.stream_id in self.results:
            r = self.results[event.stream_id]
            r.reset = event.error_code
            r.finish()
        for ev in self.http.handle_event(event):
            r = self.results.get(getattr(ev, "stream_id", None))
            if r is None:
                continue
            if isinstance(ev, HeadersReceived):
                hs = [(k.decode(), v.decode()) for k, v in ev.headers]
                if r.status is None or r.status.startswith("1"):
                    status = dict(hs).get(":status")
                    if r.status is not None:
                        r.headers.append(("interim", r.status))
                    r.status = status
                    r.headers += [h for h in hs if not h[0].startswith(":")]
                else:
                    r.trailers = hs
                if ev.stream_ended:
                    r.finish()
            elif isinstance(ev, DataReceived):
                r.length += len(ev.data)
                r.sha.update(ev.data)
                if ev.stream_ended:
                    r.finish()

    async def request(self, authority, req):
        method = req.get("method", "GET")
        path = req.get("path", "/")
        headers = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
        ] + [(k.lower().encode(), v.encode()) for k, v in req.get("headers", [])]
        if "raw_headers" in req:
            # Exactly these fields, in this order (pseudo-header fields included): the
            # shapes a hostile client sends.
            headers = [(k.encode(), v.encode()) for k, v in req["raw_headers"]]
        upload = int(req.get("upload", 0))
        body = req.get("body")
        sid = self._quic.get_next_available_stream_id()
        r = Result()
        self.results[sid] = r
        if method == "HEAD":
            HEAD_STREAMS.add(sid)
        no_body = upload == 0 and body is None and not req.get("trailers")
        self.http.send_headers(sid, headers, end_stream=no_body)
        self.transmit()
        if body is not None:
            self.http.send_data(sid, body.encode(), end_stream=not req.get("trailers"))
            self.transmit()
        sent = 0
        chunk = os.urandom(64 * 1024) if upload else b""
        up_sha = hashlib.sha256()
        reset_after = req.get("reset_after")
        while sent < upload:
            n = min(len(chunk), upload - sent)
            piece = chunk[:n]
            up_sha.update(piece)
            sent += n
            last = sent >= upload and not req.get("trailers")
            self.http.send_data(sid, piece, end_stream=last)
            self.transmit()
            if reset_after is not None and sent >= reset_after:
                self._quic.reset_stream(sid, 0x10C)
                self.transmit()
                r.reset = "sent"
                r.finish()
                break
            # Let quinn's window and ours breathe: wait while much is unsent.
            while self._quic._streams[sid].sender.buffer_is_empty is False and \
                    len(self._quic._streams[sid].sender._buffer) > 4 * 1024 * 1024:
                await asyncio.sleep(0.001)
        if req.get("trailers"):
            self.http.send_headers(
                sid,
                [(k.lower().encode(), v.encode()) for k, v in req["trailers"]],
                end_stream=True,
            )
            self.transmit()
        timeout = float(req.get("timeout", 30))
        try:
            await asyncio.wait_for(r.done, timeout)
        except asyncio.TimeoutError:
            r.reset = "timeout"
        out = r.json()
        if upload:
            out["upload_sha256"] = up_sha.hexdigest()
        return out


@contextlib.asynccontextmanager
async def connect_from(local_host, host, port, *, configuration, create_protocol,
                       session_ticket_handler, token_handler, wait_connected):
    """aioquic's connect, from a local address of one's own (aioquic's binds "::"): to be
    a client at 127.0.0.2, say, for a server that judges its clients by address."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    addr = infos[0][4]
    if len(addr) == 2:
        addr = ("::ffff:" + addr[0], addr[1], 0, 0)
    if ":" not in local_host:
        local_host = "::ffff:" + local_host
    connection = QuicConnection(configuration=configuration,
                                session_ticket_handler=session_ticket_handler,
                                token_handler=token_handler)
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind((local_host, 0, 0, 0))
    transport, protocol = await loop.create_datagram_endpoint(
        lambda: create_protocol(connection), sock=sock)
    try:
        protocol.connect(addr, transmit=wait_connected)
        if wait_connected:
            await protocol.wait_connected()
        yield protocol
    finally:
        protocol.close()
        await protocol.wait_closed()
        transport.close()


async def run(args):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    # --sni "": no server name at all (aioquic sends none for an address either).
    config.server_name = args.sni or None
    config.max_stream_data = 1 << 20
    config.max_data = 8 << 20
    if args.cert:
        config.load_cert_chain(args.cert)
    tickets = []
    tokens = []
    if args.token_in and os.path.exists(args.token_in):
        with open(args.token_in, "rb") as f:
            config.token = f.read()
    if args.token_hex:
        config.token = bytes.fromhex(args.token_hex)
    if args.ticket_in and os.path.exists(args.ticket_in):
        import pickle
        with open(args.ticket_in, "rb") as f:
            config.session_ticket = pickle.load(f)

    def save_ticket(t: SessionTicket):
        tickets.append(t)

    Client.hold_finished = args.hold_finished / 1000.0
    reqs = json.loads(args.requests)
    out = {"requests": []}
    opener = (functools.partial(connect_from, args.local_host) if args.local_host
              else connect)
    async with opener(
        args.host,
        args.port,
        configuration=config,
        create_protocol=Client,
        session_ticket_handler=save_ticket,
        token_handler=tokens.append,
        # --early: the first requests go with the Initial, in 0-RTT, before the handshake.
        wait_connected=not args.early,
    ) as client:
        authority = args.authority or args.sni or args.host
        groups = reqs if isinstance(reqs[0], list) else [reqs]
        for i, group in enumerate(groups):
            if args.rebind_after_group is not None and i == args.rebind_after_group:
                # NAT rebinding: the same connection from a new local port.
                client.change_connection_id() if args.new_cid else None
                # As aioquic's own: dual-stack IPv6, which its addresses are written for.
                sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.bind(("::", 0))
                loop = asyncio.get_event_loop()
                old = client._transport
                Client.rebound = {"sent": 0, "received": []}
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: Rebound(client), sock=sock
                )
                client._transport = Counting(transport)
                old.close()
                out["rebound_to"] = sock.getsockname()[1]
                await asyncio.wait_for(client.ping(), 5)
                out["rebound"] = Client.rebound["received"]
            if i in args.key_update_before_group:
                # The group's requests leave in the next key phase; the server must follow
                # (decrypt them, answer in it) or they go unanswered.
                client._quic.request_key_update()
                client.transmit()
            results = await asyncio.gather(*[client.request(authority, r) for r in group])
            if args.key_update_before_group:
                out.setdefault("key_phases", []).append(
                    client._quic._cryptos[tls.Epoch.ONE_RTT].key_phase)
            out["requests"] += results
            if args.pause_ms:
                await asyncio.sleep(args.pause_ms / 1000.0)
        out["alpn"] = client._quic.tls.alpn_negotiated
        out["resumed"] = bool(client._quic.tls.session_resumed)
        out["early_data_accepted"] = bool(client._quic.tls.early_data_accepted)
        await asyncio.sleep(0.2)
    if args.ticket_out and tickets:
        import pickle
        with open(args.ticket_out, "wb") as f:
            pickle.dump(tickets[-1], f)
    out["tickets"] = len(tickets)
    out["tokens"] = len(tokens)
    out["largest_datagram"] = Client.largest_datagram
    if args.token_out and tokens:
        with open(args.token_out, "wb") as f:
            f.write(tokens[-1])
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("requests", help="JSON: a list of requests, or a list of lists run in turn")
    p.add_argument("--sni", default="localhost")
    p.add_argument("--local-host", help="the address to send from (127.0.0.2, say)")
    p.add_argument("--authority")
    p.add_argument("--ticket-in")
    p.add_argument("--ticket-out")
    p.add_argument("--cert", help="a client certificate and its key, in one PEM file")
    p.add_argument("--token-in", help="a NEW_TOKEN token to open the connection with")
    p.add_argument("--token-out", help="where to keep the NEW_TOKEN token the server sends")
    p.add_argument("--token-hex", help="a token of one's own (a forged one)")
    p.add_argument("--rebind-after-group", type=int)
    p.add_argument("--new-cid", action="store_true")
    p.add_argument("--key-update-before-group", type=int, action="append", default=[],
                   help="a group before which the client updates its 1-RTT keys (RFC 9001 §6)")
    p.add_argument("--pause-ms", type=float, default=0, help="ms between two groups")
    p.add_argument("--early", action="store_true", help="send the first requests in 0-RTT")
    p.add_argument("--hold-finished", type=float, default=0, help="ms to hold the handshake's end")
    p.add_argument("--deadline", type=float, default=120, help="seconds for the whole run")
    args = p.parse_args()
    try:
        asyncio.run(asyncio.wait_for(run(args), args.deadline))
    except Exception as e:  # the test reads why
        import traceback; traceback.print_exc(file=sys.stderr)
        print(json.dumps({"error": repr(e)}))
        sys.exit(1)


if __name__ == "__main__":
    main()
