"""UDP server that echoes each datagram back reversed.

Arguments: ADDR PORT COUNT.  Binds ADDR:PORT, prints "READY", then for each of
COUNT datagrams prints its payload as hex and sends it back to the sender with
its bytes in reverse order. Gives up after 20 s without a datagram.
"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(20)
print("READY", flush=True)
for _ in range(int(sys.argv[3])):
    data, peer = s.recvfrom(65535)
    print(data.hex(), flush=True)
    s.sendto(data[::-1], peer)
