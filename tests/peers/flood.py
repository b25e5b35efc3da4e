"""Floods an interface with numbered broadcast frames.

Arguments: IFNAME COUNT SIZE.  Sends COUNT broadcast frames of SIZE bytes
(EtherType 0x88b5, source 02:00:00:00:00:07, the frame's index as a big-endian
u32 at the start of the payload) as fast as it can.
"""
import socket, struct, sys
ifname, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
for i in range(count):
    s.send(b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x07" + b"\x88\xb5" + struct.pack("!I", i) + bytes(size - 18))
