#!/usr/bin/python3
"""Throws garbage connections at a farm coordinator (scripts/soak.sh).

soak_garbage.py HOST PORT SERVER_PUB ALLOWED_KEY INTRUDER_KEY SEED

One round: a random choice of
  raw      TCP: random bytes, a truncated ZMTP greeting, or a connection held silent;
  null     a ZeroMQ DEALER without CURVE (mechanism mismatch: refused at the handshake);
  intruder a CURVE DEALER with a key not in the allow-list (refused by the ZAP handler);
  frames   a CURVE DEALER with an allowed key sending bad frames: random bytes, truncated
           and wrong-version envelopes, a Hello without devices, Ready for a device it never
           offered, Results for leases it does not hold, multi-part and empty messages,
           occasionally a frame over the 16 MiB limit; then it vanishes without Bye.
None of this may change a tune's results: the coordinator drops, refuses or ignores it.
ZeroMQ through ctypes (libzmq.so.5, which dc links), so no Python package is needed.
Prints the kind it threw; exit 0 unless the script itself is broken.
"""
import ctypes
import ctypes.util
import random
import re
import socket
import sys
import time

ZMQ_DEALER, ZMQ_SNDMORE, ZMQ_DONTWAIT = 5, 2, 1
ZMQ_LINGER, ZMQ_SNDTIMEO = 17, 28
ZMQ_CURVE_PUBLICKEY, ZMQ_CURVE_SECRETKEY, ZMQ_CURVE_SERVERKEY = 48, 49, 50


def load_zmq():
  lib = ctypes.CDLL(ctypes.util.find_library("zmq") or "libzmq.so.5")
  lib.zmq_ctx_new.restype = ctypes.c_void_p
  lib.zmq_socket.restype = ctypes.c_void_p
  lib.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
  lib.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
  lib.zmq_connect.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
  lib.zmq_send.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
  lib.zmq_close.argtypes = [ctypes.c_void_p]
  lib.zmq_ctx_term.argtypes = [ctypes.c_void_p]
  return lib


def read_key(path, name):
  m = re.search(name + r'\s*=\s*"([^"]{40})"', open(path).read())
  if not m:
    sys.exit(f"soak_garbage: no {name} in {path}")
  return m.group(1).encode()


# Protocol buffers by hand (farm.proto): enough to make frames that parse or almost parse.
def varint(n):
  out = bytearray()
  while True:
    b = n & 0x7F
    n >>= 7
    out.append(b | (0x80 if n else 0))
    if not n:
      return bytes(out)


def field_varint(num, v):
  return varint(num << 3) + varint(v)


def field_bytes(num, b):
  return varint((num << 3) | 2) + varint(len(b)) + b


def envelope(body_field, body, version=1):
  return field_varint(1, version) + field_bytes(body_field, body)


def bad_frames(rng):
  hello = envelope(10, field_bytes(1, b"soak-garbage-%d" % rng.randrange(1 << 30)) + field_bytes(2, b"garbage"))
  frames = [
      [rng.randbytes(rng.randrange(1, 512))],
      [hello[: rng.randrange(1, len(hello))]],                       # truncated
      [envelope(10, field_bytes(1, b"soak-old"), version=99)],      # another version
      [hello],                                                     # Hello without devices
      [envelope(13, field_varint(1, 0) + field_varint(2, 5))],      # Ready, device never offered
      [envelope(15, field_varint(1, rng.randrange(1 << 63)) + field_bytes(3, b"ok")
                + varint((5 << 3) | 1) + b"\x00\x00\x00\x00\x00\x00\xf0\x3f")],  # Result, lease not held
      [b""],
      [hello, rng.randbytes(64)],                                  # multi-part
      [envelope(16, b"") + rng.randbytes(8)],
  ]
  rng.shuffle(frames)
  if rng.random() < 0.05:
    frames.append([b"\x00" * (17 << 20)])                          # over the frame limit
  return frames


def zmq_round(args, kind, rng):
  host, port, server_pub, allowed, intruder = args
  lib = load_zmq()
  ctx = lib.zmq_ctx_new()
  s = lib.zmq_socket(ctx, ZMQ_DEALER)
  zero, timeout = ctypes.c_int(0), ctypes.c_int(500)
  lib.zmq_setsockopt(s, ZMQ_LINGER, ctypes.byref(zero), ctypes.sizeof(zero))
  lib.zmq_setsockopt(s, ZMQ_SNDTIMEO, ctypes.byref(timeout), ctypes.sizeof(timeout))
  if kind != "null":
    key_file = allowed if kind == "frames" else intruder
    for opt, value in ((ZMQ_CURVE_SERVERKEY, read_key(server_pub, "public-key")),
                       (ZMQ_CURVE_PUBLICKEY, read_key(key_file, "public-key")),
                       (ZMQ_CURVE_SECRETKEY, read_key(key_file, "secret-key"))):
      buf = ctypes.create_string_buffer(value)
      lib.zmq_setsockopt(s, opt, buf, 41)
  lib.zmq_connect(s, f"tcp://{host}:{port}".encode())
  messages = bad_frames(rng) if kind == "frames" else [[b"\x08\x01"], [rng.randbytes(100)]]
  for parts in messages:
    for i, part in enumerate(parts):
      lib.zmq_send(s, part, len(part), ZMQ_SNDMORE if i + 1 < len(parts) else 0)
    time.sleep(rng.uniform(0, 0.05))
  time.sleep(rng.uniform(0.2, 1.0))
  lib.zmq_close(s)
  lib.zmq_ctx_term(ctx)


def raw_round(host, port, rng):
  greeting = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
  with socket.create_connection((host, int(port)), timeout=2) as c:
    what = rng.choice(["random", "greeting", "silent"])
    if what == "random":
      c.sendall(rng.randbytes(rng.randrange(1, 4096)))
    elif what == "greeting":
      c.sendall(greeting[: rng.randrange(1, len(greeting))])
    time.sleep(rng.uniform(0.1, 2.0))
  return what


def main():
  if len(sys.argv) != 7:
    sys.exit(__doc__)
  host, port, server_pub, allowed, intruder, seed = sys.argv[1:]
  rng = random.Random(int(seed))
  kind = rng.choice(["raw", "null", "intruder", "frames", "frames"])
  try:
    if kind == "raw":
      kind += "/" + raw_round(host, port, rng)
    else:
      zmq_round((host, port, server_pub, allowed, intruder), kind, rng)
  except OSError as e:  # no coordinator listening between tunes: nothing to throw at
    kind += f" (not connected: {e.strerror})"
  print(kind)


if __name__ == "__main__":
  main()
