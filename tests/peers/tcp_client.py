"""TCP client: sends a byte pattern, then prints what comes back.

Arguments: HOST PORT N_OUT N_IN.  Prints "READY", connects to HOST:PORT, sends
N_OUT bytes (byte i is i mod 253), reads until N_IN bytes arrived or the peer
closed, and prints them as one hex line.
"""
import socket, sys
host, port, n_out, n_in = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print("READY", flush=True)
c = socket.create_connection((host, port), timeout=20)
c.sendall(bytes(i % 253 for i in range(n_out)))
got = b""
while len(got) < n_in:
    d = c.recv(65536)
    if not d:
        break
    got += d
print(got.hex(), flush=True)
c.close()
