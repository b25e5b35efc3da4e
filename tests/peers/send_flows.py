"""Sends IPv4/UDP frames spread over many flows on an interface.

Arguments: IFNAME COUNT FLOWS SRC_PREFIX DST_MAC.  Sends COUNT frames of 64
bytes round-robin over FLOWS flows: flow i has the source MAC SRC_PREFIX:ii
(SRC_PREFIX is the first five octets, e.g. 02:00:00:0a:00) and UDP source
port 10000 + i, so that a flow hash (AF_PACKET fanout, a multiqueue TAP's
queue choice) and the switch's own address hash spread them over queues.
Prints "sent=COUNT" when done.
"""
import socket, struct, sys

ifname, count, flows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
prefix = bytes.fromhex(sys.argv[4].replace(":", ""))
dst = bytes.fromhex(sys.argv[5].replace(":", ""))


def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


frames = []
for i in range(flows):
    payload = bytes(64 - 14 - 20 - 8)
    udp = struct.pack("!HHHH", 10000 + i, 9, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i, 0, 64, 17, 0,
                     bytes([10, 9, 0, 1]), bytes([10, 9, 0, 2]))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    frames.append(dst + prefix + bytes([i & 0xFF]) + b"\x08\x00" + ip + udp)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
for n in range(count):
    s.send(frames[n % flows])
print("sent=%d" % count, flush=True)
