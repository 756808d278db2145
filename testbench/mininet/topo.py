#!/usr/bin/python3
"""Mininet topology of the lbc scenario testbench (BMv2 + XDP fallback host).

Run with Debian's /usr/bin/python3 (it has Debian's mininet package); the
Go runner (testbench/scenario, `lbc-testbench run --topology mininet`)
starts it, reads one JSON line describing the nodes, attaches their
namespaces by PID, starts simple_switch_grpc in the switch node and drives
everything else. The topology lives until stdin closes (or SIGTERM), then
Mininet removes it.

No Open vSwitch (this kernel has no openvswitch datapath): the backend LAN
is a Linux bridge inside its own node's namespace, every other link is a
direct veth pair.

    client ── sw-eth1 ┐
                      │ BMv2 (port 1 client, port 2 LAN, port 3 fallback)
    LAN ───── sw-eth2 ┤
    fb-eth0 ─ sw-eth3 ┘   fallback host: XDP on fb-eth0, redirects to fb-eth1
    fb-eth1 ─ LAN         (probes and tunnel source 10.99.0.2)
    be1..N ── LAN         backends 10.99.0.11.., VIP on lo, XDP decap

Addresses exist only inside these namespaces: clients 10.98.0.10 and
10.98.0.100.., LAN 10.99.0.0/24, VIP 10.99.100.1.
"""

import argparse
import json
import signal
import sys

from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host

GW_CLIENT = "10.98.0.1"   # the client's next hop: the switch (no ARP there)
GW_LAN = "10.99.0.1"      # the backends' next hop to the clients: the switch
SW_MAC = "02:99:00:00:00:01"      # the switch's ports; the backends' gateway MAC
CLIENT_GW_MAC = "02:98:00:00:00:01"  # the client's gateway MAC (kept off the LAN)


def mac(i, j):
    return "02:%02x:00:00:%02x:%02x" % (0x98, i, j)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tag", required=True, help="short unique tag for node names")
    ap.add_argument("--backends", type=int, required=True)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--vip", default="10.99.100.1")
    a = ap.parse_args()
    if not 1 <= a.backends <= 16 or not 1 <= a.clients <= 100 or len(a.tag) > 5:
        sys.exit("topo.py: --backends 1..16, --clients 1..100, --tag at most 5 characters")
    setLogLevel("warning")
    t = a.tag
    net = Mininet(topo=None, controller=None, switch=None, host=Host, build=False,
                  autoSetMacs=False, autoStaticArp=False)
    sw = net.addHost("s" + t, ip=None)
    cl = net.addHost("c" + t, ip=None)
    lan = net.addHost("l" + t, ip=None)
    fb = net.addHost("f" + t, ip=None)
    bes = [net.addHost("b%s%d" % (t, i + 1), ip=None) for i in range(a.backends)]

    links = []

    def link(n1, i1, n2, i2, m1=None, m2=None):
        l = net.addLink(n1, n2, intfName1=i1, intfName2=i2, addr1=m1, addr2=m2)
        links.append(l)
        return l

    def run(node, cmd):
        out = node.cmd(cmd + " ; echo rc=$?")
        if not out.strip().endswith("rc=0"):
            raise RuntimeError("%s: %s: %s" % (node.name, cmd, out.strip()))

    try:
        link(sw, "s%s-eth1" % t, cl, "c%s-eth0" % t, SW_MAC, mac(1, 10))
        link(sw, "s%s-eth2" % t, lan, "l%s-sw" % t, SW_MAC, mac(3, 1))
        link(sw, "s%s-eth3" % t, fb, "f%s-eth0" % t, SW_MAC, mac(2, 2))
        link(fb, "f%s-eth1" % t, lan, "l%s-fb" % t, mac(0x99, 2), mac(3, 2))
        for i, b in enumerate(bes):
            link(b, "b%s%d-eth0" % (t, i + 1), lan, "l%s-b%d" % (t, i + 1), mac(0x99, 0x11 + i), mac(3, 0x11 + i))
        net.build()
        net.start()
        for n in [sw, cl, lan, fb] + bes:
            run(n, "ip link set lo up")
            run(n, "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0")
        # The switch node carries no address and sends nothing itself.
        run(sw, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
        for i in (1, 2, 3):
            run(sw, "ip link set s%s-eth%d up" % (t, i))  # MTU 1500: native XDP on a veth refuses a peer MTU above ~3.5k
        # LAN: a Linux bridge in its own namespace.
        run(lan, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        run(lan, "ip link add br0 type bridge && ip link set br0 up")
        for intf in lan.intfList():
            if intf.name != "lo":
                run(lan, "ip link set %s master br0 up" % intf.name)
        # The backends' gateway is the switch's LAN port, whatever the bridge
        # learns from frames other hosts send.
        run(lan, "bridge fdb replace %s dev l%s-sw master static" % (SW_MAC, t))
        # Client: several source addresses, the VIP via the switch.
        ce = "c%s-eth0" % t
        clients = ["10.98.0.10"] + ["10.98.0.%d" % (99 + i) for i in range(1, a.clients)]
        for c in clients:
            run(cl, "ip addr add %s/24 dev %s" % (c, ce))
        run(cl, "ip link set %s mtu 1400 up" % ce)
        # The fallback host's XDP forwards fragments onto the LAN with the
        # frame's destination MAC as source: the client's gateway MAC must
        # differ from the backends' one, or the bridge would learn the
        # backends' gateway on the fallback host's port.
        run(cl, "ip neigh replace %s lladdr %s dev %s" % (GW_CLIENT, CLIENT_GW_MAC, ce))
        run(cl, "ip route add %s/32 via %s" % (a.vip, GW_CLIENT))
        # Fallback host: fb-eth0 takes the switch's fallback port (no
        # address), fb-eth1 is on the LAN.
        run(fb, "ip link set f%s-eth0 up" % t)
        run(fb, "ip addr add 10.99.0.2/24 dev f%s-eth1" % t)
        backends = []
        for i, b in enumerate(bes):
            ifn = "b%s%d-eth0" % (t, i + 1)
            ip = "10.99.0.%d" % (11 + i)
            run(b, "ip addr add %s/24 dev %s" % (ip, ifn))
            run(b, "ip addr add %s/32 dev lo" % a.vip)
            run(b, "ip neigh replace %s lladdr %s dev %s" % (GW_LAN, SW_MAC, ifn))
            run(b, "ip route add 10.98.0.0/24 via %s" % GW_LAN)
            backends.append({"node": b.name, "pid": b.pid, "ip": ip, "mac": mac(0x99, 0x11 + i), "intf": ifn})
        desc = {
            "switch": {"node": sw.name, "pid": sw.pid, "ports": {"1": "s%s-eth1" % t, "2": "s%s-eth2" % t, "3": "s%s-eth3" % t}},
            "client": {"node": cl.name, "pid": cl.pid, "intf": ce, "mac": mac(1, 10), "addrs": clients},
            "lan": {"node": lan.name, "pid": lan.pid, "fbPeer": "l%s-fb" % t},
            "fallback": {"node": fb.name, "pid": fb.pid, "in": "f%s-eth0" % t, "out": "f%s-eth1" % t, "ip": "10.99.0.2"},
            "backends": backends,
            "vip": a.vip,
        }
        print(json.dumps(desc), flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        # Live until the runner closes stdin.
        for _ in sys.stdin:
            pass
    except Exception as e:  # reported to the runner on stdout
        print(json.dumps({"error": str(e)}), flush=True)
    finally:
        net.stop()


if __name__ == "__main__":
    main()
