"""Captures frames of one EtherType on an interface and prints each as hex.

Arguments: IFNAME PROTO COUNT TIMEOUT.  Prints "READY" once the socket is bound,
then one hex line per frame (outgoing frames ignored), and "DONE" after COUNT
frames or TIMEOUT seconds, whichever comes first.
"""
import select, socket, sys, time
ifname, proto, count, timeout = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(proto))
s.bind((ifname, proto))
s.setsockopt(263, 23, 1)  # SOL_PACKET, PACKET_IGNORE_OUTGOING
print("READY", flush=True)
end = time.monotonic() + timeout
n = 0
while n < count:
    left = end - time.monotonic()
    if left <= 0 or not select.select([s], [], [], left)[0]:
        break
    print(s.recv(262144).hex(), flush=True)
    n += 1
print("DONE", flush=True)
