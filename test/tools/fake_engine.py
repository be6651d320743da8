#!/usr/bin/env python3
# fake_engine.py - a misbehaving stand-in for `opus_engine serve --fd N`, to
# test that the opus_pg supervisor validates every frame it receives and
# survives engines that lie, crash or hang.  Point opus.engine_path at this
# file (it must be executable) and choose the misbehaviour with the
# environment variable OPUS_FAKE_ENGINE_MODE of the postmaster:
#
#   bad_type     answer a SUBMIT with a frame of an unknown type (default)
#   bad_done     answer with a DONE whose finish and status disagree
#   huge_frame   answer with a header announcing a payload over the limit
#   wrong_id     answer with a DONE for a request id no slot can have
#   garbage      answer with 64 random bytes
#   crash        die from SIGSEGV on the first SUBMIT
#   bad_version  answer HELLO with a READY of another protocol version
#   never_ready  read HELLO and then say nothing
#   echo         behave: answer every generate/chat with TEXT "ok" + DONE
#
# The wire format is src/protocol.h: 16-byte header (u32 length, u16 type,
# u16 flags, u64 id), little-endian.
import os
import signal
import socket
import struct
import sys
import time

MAGIC = 0x5355504F
HELLO, READY, FATAL, SUBMIT, CANCEL, TEXT, TOKENS, DONE, STATS, PING, PONG = range(1, 12)


def main():
    fd = int(sys.argv[sys.argv.index("--fd") + 1])
    mode = os.environ.get("OPUS_FAKE_ENGINE_MODE", "bad_type")
    s = socket.socket(fileno=fd)

    def recv_exact(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                sys.exit(0)
            b += c
        return b

    def recv_frame():
        ln, typ, _flags, rid = struct.unpack("<IHHQ", recv_exact(16))
        return typ, rid, recv_exact(ln)

    def send(typ, rid, payload=b""):
        s.sendall(struct.pack("<IHHQ", len(payload), typ, 0, rid) + payload)

    def done(finish, code=0, n_prompt=1, n_completion=1, msg=b""):
        return (struct.pack("<BBHIiii", finish, 0, 0, code, n_prompt, n_completion, 0)
                + struct.pack("<ddd", 0.0, 0.1, 0.2) + struct.pack("<H", len(msg)) + msg)

    recv_frame()  # HELLO
    if mode == "never_ready":
        while True:
            time.sleep(3600)
    version = 99 if mode == "bad_version" else 1

    def pad(b, n):
        return b.ljust(n, b"\0")

    ready = (struct.pack("<IIq8iq", MAGIC, version, 1000, 2048, 2048, 100, 2, 8, 1, 1,
                         os.getpid(), 1024)
             + pad(b"fake", 128) + pad(b"llama", 32) + pad(b"F32", 32) + pad(b"chatml", 32))
    send(READY, 0, ready)
    while True:
        typ, rid, payload = recv_frame()
        if typ == PING:
            send(PONG, rid)
            continue
        if typ != SUBMIT:
            continue
        if mode == "bad_type":
            send(99, rid)
        elif mode == "bad_done":
            send(DONE, rid, done(1, code=8))
        elif mode == "huge_frame":
            s.sendall(struct.pack("<IHHQ", 0x7FFFFFFF, TEXT, 0, rid))
        elif mode == "wrong_id":
            send(DONE, (rid & ~0xFFFFFFFF) | 0xFFFFFF, done(1))
        elif mode == "garbage":
            s.sendall(os.urandom(64))
        elif mode == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        else:
            kind = payload[0]
            if kind == 3:  # tokenize
                send(TOKENS, rid, struct.pack("<i", 1))
            else:
                send(TEXT, rid, b"ok")
            send(DONE, rid, done(2))


if __name__ == "__main__":
    main()
