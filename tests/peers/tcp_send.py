"""Sends a byte pattern over one TCP connection.

Arguments: HOST PORT N.  Connects to HOST:PORT, sends N bytes (byte i is
i mod 251) and closes the connection.
"""
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = bytes(i % 251 for i in range(n))
c = socket.create_connection((host, port), timeout=10)
c.sendall(data)
c.close()
