"""Legacy ethtool "set" commands through SIOCETHTOOL (no ethtool binary needed).

Arguments: IFNAME CMD=VALUE...  Each CMD=VALUE (integers, any base) issues one
`struct ethtool_value` set command (ETHTOOL_S*) on interface IFNAME.
"""
import array, fcntl, socket, struct, sys
SIOCETHTOOL = 0x8946
for pair in sys.argv[2:]:
    cmd, val = (int(x, 0) for x in pair.split("="))
    buf = array.array("B", struct.pack("II", cmd, val))
    ifr = struct.pack("16sP16x", sys.argv[1].encode(), buf.buffer_info()[0])
    fcntl.ioctl(socket.socket(socket.AF_INET, socket.SOCK_DGRAM), SIOCETHTOOL, ifr)
