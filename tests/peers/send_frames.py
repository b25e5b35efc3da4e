"""Sends raw Ethernet frames on an interface.

Arguments: IFNAME HEX...  Each HEX argument is one whole frame, sent as is on
an AF_PACKET socket bound to IFNAME.
"""
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for h in sys.argv[2:]:
    s.send(bytes.fromhex(h))
