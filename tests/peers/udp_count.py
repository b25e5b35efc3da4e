"""Counts UDP datagrams and their payload lengths.

Arguments: ADDR PORT.  Binds ADDR:PORT (16 MiB receive buffer), prints "ready",
then, whenever the count changed and 0.2 s passed without traffic, prints
"UDP count=N lengths=L1:N1,L2:N2,..." (payload length: datagrams). Runs until
killed.
"""
import collections, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(0.2)
print("ready", flush=True)
count, shown, lengths = 0, 0, collections.Counter()
while True:
    try:
        b = s.recv(65536)
        count += 1
        lengths[len(b)] += 1
    except socket.timeout:
        if count != shown:
            shown = count
            ls = ",".join("%d:%d" % kv for kv in sorted(lengths.items()))
            print("UDP count=%d lengths=%s" % (count, ls), flush=True)
