"""Sends one Ethernet/IPv4/UDP frame whose UDP checksum is wrong.

Arguments: IFNAME DST_MAC SRC_IP DST_IP.  Builds the frame by hand (source MAC
of IFNAME, UDP 40000 -> 9, a fixed payload, a valid IPv4 header checksum and a
UDP checksum that is off) and sends it on an AF_PACKET socket.
"""
import socket, struct, sys
ifn, dmac, sip, dip = sys.argv[1:5]
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
mac = lambda m: bytes(int(x, 16) for x in m.split(":"))
smac = open("/sys/class/net/%s/address" % ifn).read().strip()
src, dst = socket.inet_aton(sip), socket.inet_aton(dip)
payload = b"vhu: this checksum is wrong"
ulen = 8 + len(payload)
good = csum(src + dst + struct.pack("!BBH", 0, 17, ulen) + struct.pack("!HHHH", 40000, 9, ulen, 0) + payload) or 0xffff
bad = good % 0xfffe + 1
udp = struct.pack("!HHHH", 40000, 9, ulen, bad) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + ulen, 1, 0, 64, 17, 0, src, dst)
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifn, 0))
s.send(mac(dmac) + mac(smac) + b"\x08\x00" + ip + udp)
