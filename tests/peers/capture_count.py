"""Captures a number of frames of one EtherType and prints each as hex.

Arguments: IFNAME PROTO COUNT.  Prints "READY" once the socket is bound, then
one hex line per frame (outgoing frames ignored) for COUNT frames. Gives up
after 20 s without a frame.
"""
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(int(sys.argv[2], 0)))
s.bind((sys.argv[1], 0))
s.setsockopt(263, 23, 1)  # PACKET_IGNORE_OUTGOING
s.settimeout(20)
print("READY", flush=True)
for _ in range(int(sys.argv[3])):
    print(s.recv(262144).hex(), flush=True)
