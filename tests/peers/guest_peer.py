"""The guest's peers in the namespace, for the patch guest tests.

Arguments: ADDR TFTP_PORT SINK_PORT GUEST SOURCE_PORT MIB.
* a TFTP server on ADDR:TFTP_PORT: serves "vhu-get.bin" (200 KiB + 123 bytes of
  seeded random data) and takes "vhu-put.bin";
* a TCP sink on ADDR:SINK_PORT that answers each connection with the sha256 and
  length of what it received;
* a TCP source that connects to GUEST:SOURCE_PORT and sends MIB MiB.
A port of 0 turns its part off. Prints "PEER key=value ..." lines (results and
errors) and "PEER ready" once everything listens; runs until killed.
"""
import hashlib, random, socket, struct, sys, threading, time
addr = sys.argv[1]
tftp_port, sink_port, src_port, src_mib = (int(sys.argv[i]) for i in (2, 3, 5, 6))
guest = sys.argv[4]
lock = threading.Lock()
def say(s):
    with lock:
        print("PEER " + s, flush=True)

GET = random.Random(1).randbytes(200 * 1024 + 123)

def tftp_send(peer, data):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 0))
    s.settimeout(1.0)
    block, off = 1, 0
    while True:
        chunk = data[off:off + 512]
        pkt = struct.pack("!HH", 3, block & 0xffff) + chunk
        for _ in range(30):
            s.sendto(pkt, peer)
            try:
                while True:
                    r, _ = s.recvfrom(1500)
                    op, b = struct.unpack("!HH", r[:4])
                    if op == 4 and b == block & 0xffff:
                        break
                break
            except socket.timeout:
                continue
        else:
            say("tftp_get_error=timeout")
            return
        off += 512
        block += 1
        if len(chunk) < 512:
            break
    say("tftp_get_sent=%d" % len(data))

def tftp_recv(peer):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 0))
    s.settimeout(30.0)
    got, block = bytearray(), 0
    s.sendto(struct.pack("!HH", 4, 0), peer)
    while True:
        try:
            r, p = s.recvfrom(70000)
        except socket.timeout:
            say("tftp_put_error=timeout")
            return
        op, b = struct.unpack("!HH", r[:4])
        if op != 3:
            continue
        if b == (block + 1) & 0xffff:
            got += r[4:]
            block += 1
        s.sendto(struct.pack("!HH", 4, b), p)
        if b == block & 0xffff and len(r) - 4 < 512:
            break
    say("tftp_put_bytes=%d tftp_put_sha256=%s" % (len(got), hashlib.sha256(got).hexdigest()))

def tftp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, tftp_port))
    while True:
        r, peer = s.recvfrom(1500)
        op = struct.unpack("!H", r[:2])[0]
        name = r[2:].split(b"\0")[0].decode(errors="replace")
        if op == 1 and name == "vhu-get.bin":
            threading.Thread(target=tftp_send, args=(peer, GET), daemon=True).start()
        elif op == 2 and name == "vhu-put.bin":
            threading.Thread(target=tftp_recv, args=(peer,), daemon=True).start()
        else:
            s.sendto(struct.pack("!HH", 5, 1) + b"not found\0", peer)

def sink():
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, sink_port))
    l.listen(1)
    while True:
        c, _ = l.accept()
        h, n, t0 = hashlib.sha256(), 0, time.time()
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            h.update(b)
            n += len(b)
        d = h.hexdigest()
        c.sendall(("%s %d\n" % (d, n)).encode())
        c.close()
        say("tcp_sink_sha256=%s tcp_sink_bytes=%d tcp_sink_secs=%.2f" % (d, n, time.time() - t0))

def source():
    data = random.Random(2).randbytes(src_mib << 20)
    d = hashlib.sha256(data).hexdigest()
    deadline = time.time() + 600
    while True:
        try:
            c = socket.create_connection((guest, src_port), timeout=2)
            break
        except OSError:
            if time.time() > deadline:
                say("tcp_source_error=connect")
                return
            time.sleep(0.2)
    t0 = time.time()
    c.settimeout(None)
    c.sendall(data)
    c.close()
    say("tcp_source_sha256=%s tcp_source_bytes=%d tcp_source_secs=%.2f" % (d, len(data), time.time() - t0))

for port, fn in ((tftp_port, tftp), (sink_port, sink), (src_port, source)):
    if port:
        threading.Thread(target=fn, daemon=True).start()
say("tftp_get_sha256=%s tftp_get_bytes=%d" % (hashlib.sha256(GET).hexdigest(), len(GET)))
say("ready")
while True:
    time.sleep(3600)
