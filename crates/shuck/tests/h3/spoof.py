#!/usr/bin/env python3
"""QUIC Initials as a spoofer sends them, for shuck's client-limit test: COUNT real
Initial datagrams (aioquic's, a ClientHello padded to 1 200 bytes, each of a connection of
its own) sent from a socket bound to FROM, and nothing read or answered after them, as
when the source address is a victim's and the answers go to the victim."""
import argparse
import json
import socket
import ssl
import time

from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection


def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("count", type=int)
    p.add_argument("--from", dest="source", default="127.0.0.1")
    args = p.parse_args()
    sent = 0
    for _ in range(min(args.count, 1000)):
        c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
        c.verify_mode = ssl.CERT_NONE
        c.server_name = "localhost"
        conn = QuicConnection(configuration=c)
        conn.connect((args.host, args.port), now=time.time())
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((args.source, 0))
        for data, _ in conn.datagrams_to_send(now=time.time()):
            s.sendto(data, (args.host, args.port))
            sent += len(data)
        s.close()
    print(json.dumps({"bytes": sent}))


if __name__ == "__main__":
    main()
