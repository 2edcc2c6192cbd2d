#!/usr/bin/env python3
"""Generate the example node trees under examples/ (gke-a4, dgx-h100).

Each tree is a sysroot as `epkit --sysroot` reads it: /sys with relative
symbolic links laid out as the kernel does (/sys/bus/pci/devices/<bdf> ->
../../../devices/pci0000:xx/.../<bdf>), /proc, /dev and /etc files. Only text
files and links; no binary content. The trees are committed; rerun this script
after changing it:

    python3 tools/make_example_nodes.py            # writes examples/gke-a4, examples/dgx-h100
    python3 tools/make_example_nodes.py --out DIR  # somewhere else
"""

import argparse
import os
import shutil

NVIDIA = 0x10DE
MELLANOX = 0x15B3
BROADCOM = 0x1000
INTEL = 0x8086
GOOGLE = 0x1AE0

CLASS_GPU_3D = 0x030200
CLASS_NVSWITCH = 0x068000
CLASS_BRIDGE = 0x060400
CLASS_ETHERNET = 0x020000
CLASS_INFINIBAND = 0x020700


# Two sockets of 56 cores with SMT, as on a dual Xeon 8480C host.
CPULIST = {0: "0-55,112-167\n", 1: "56-111,168-223\n"}


class Tree:
    """Files and links under one root folder."""

    def __init__(self, root):
        self.root = root

    def host(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def write(self, path, text):
        p = self.host(path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="ascii") as f:
            f.write(text)

    def link(self, path, target_node_path):
        """A relative link at `path` naming node path `target_node_path`."""
        p = self.host(path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        rel = os.path.relpath(target_node_path, os.path.dirname(path))
        if os.path.lexists(p):
            os.remove(p)
        os.symlink(rel, p)


def bdf(bus, dev=0, fn=0):
    return f"0000:{bus:02x}:{dev:02x}.{fn}"


class PciBuilder:
    """Writes PCI devices under /sys/devices/pci0000:<root>/... and their
    /sys/bus/pci/devices links."""

    def __init__(self, tree):
        self.tree = tree

    def device(self, parent, address, vendor, device, cls, numa, speed="32.0 GT/s PCIe",
               width=16, driver=None):
        path = f"{parent}/{address}"
        t = self.tree
        t.write(f"{path}/vendor", f"0x{vendor:04x}\n")
        t.write(f"{path}/device", f"0x{device:04x}\n")
        t.write(f"{path}/class", f"0x{cls:06x}\n")
        t.write(f"{path}/numa_node", f"{numa}\n")
        t.write(f"{path}/local_cpulist", CPULIST[numa])
        t.write(f"{path}/current_link_speed", f"{speed}\n")
        t.write(f"{path}/current_link_width", f"{width}\n")
        t.write(f"{path}/max_link_speed", f"{speed}\n")
        t.write(f"{path}/max_link_width", f"{width}\n")
        t.link(f"/sys/bus/pci/devices/{address}", path)
        if driver:
            t.write(f"/sys/bus/pci/drivers/{driver}/uevent", f"DRIVER={driver}\n")
            t.link(f"{path}/driver", f"/sys/bus/pci/drivers/{driver}")
        return path

    def switch(self, root_bus, numa, ports):
        """Root port on root_bus, a PCIe switch below it with `ports`
        downstream ports. Returns the downstream port paths."""
        root = f"/sys/devices/pci0000:{root_bus:02x}"
        rp = self.device(root, bdf(root_bus, 1), INTEL, 0x352A, CLASS_BRIDGE, numa)
        up = self.device(rp, bdf(root_bus + 1), BROADCOM, 0xC030, CLASS_BRIDGE, numa)
        return [self.device(up, bdf(root_bus + 2, d), BROADCOM, 0xC030, CLASS_BRIDGE, numa)
                for d in range(ports)]


GPU_NAMES = {0x2901: "NVIDIA B200", 0x2330: "NVIDIA H100 80GB HBM3"}


def gpu(pci, tree, parent, address, device_id, numa, minor, driver_version):
    path = pci.device(parent, address, NVIDIA, device_id, CLASS_GPU_3D, numa, driver="nvidia")
    uuid = f"GPU-{device_id:04x}{minor:04x}-5e1f-4c2a-9b7d-0000000000{minor:02x}"
    tree.write(f"/proc/driver/nvidia/gpus/{address}/information",
               f"Model: \t\t {GPU_NAMES[device_id]}\n"
               f"IRQ:   \t\t {200 + minor}\n"
               f"GPU UUID: \t {uuid}\n"
               "Video BIOS: \t 97.00.00.00.00\n"
               "Bus Type: \t PCIe\n"
               "DMA Size: \t 52 bits\n"
               "DMA Mask: \t 0xfffffffffffff\n"
               f"Bus Location: \t {address}\n"
               f"Device Minor: \t {minor}\n"
               f"GPU Firmware: \t {driver_version}\n"
               "GPU Excluded:\t No\n")
    return path


def netdev(tree, dev_path, name, mac, mtu, operstate="up"):
    """A netdev folder below a PCI device, and its /sys/class/net link."""
    path = f"{dev_path}/net/{name}"
    tree.write(f"{path}/operstate", f"{operstate}\n")
    tree.write(f"{path}/address", f"{mac}\n")
    tree.write(f"{path}/mtu", f"{mtu}\n")
    tree.link(f"{path}/device", dev_path)
    tree.link(f"/sys/class/net/{name}", path)


def virtual_netdev(tree, name, mac, mtu, operstate="unknown"):
    path = f"/sys/devices/virtual/net/{name}"
    tree.write(f"{path}/operstate", f"{operstate}\n")
    tree.write(f"{path}/address", f"{mac}\n")
    tree.write(f"{path}/mtu", f"{mtu}\n")
    tree.link(f"/sys/class/net/{name}", path)


def ib_device(tree, dev_path, name, uverbs, guid, link_layer, rate, gids, state="4: ACTIVE",
              phys_state="5: LinkUp"):
    """An RDMA device below a PCI device. gids: list of (index, gid, type, ndev)."""
    path = f"{dev_path}/infiniband/{name}"
    tree.write(f"{path}/node_type", "1: CA\n")
    tree.write(f"{path}/hca_type", "MT4129\n")
    tree.write(f"{path}/fw_ver", "28.39.1002\n")
    tree.write(f"{path}/node_guid", f"{guid}\n")
    tree.link(f"{path}/device", dev_path)
    port = f"{path}/ports/1"
    tree.write(f"{port}/state", f"{state}\n")
    tree.write(f"{port}/phys_state", f"{phys_state}\n")
    tree.write(f"{port}/rate", f"{rate}\n")
    tree.write(f"{port}/link_layer", f"{link_layer}\n")
    used = {i for i, _, _, _ in gids}
    for i, gid, gtype, ndev in gids:
        tree.write(f"{port}/gids/{i}", f"{gid}\n")
        tree.write(f"{port}/gid_attrs/types/{i}", f"{gtype}\n")
        tree.write(f"{port}/gid_attrs/ndevs/{i}", f"{ndev}\n")
    # Unused table entries read as zeros, as in sysfs (their attrs are unreadable there).
    for i in range(max(used) + 1, max(used) + 5):
        tree.write(f"{port}/gids/{i}", "0000:0000:0000:0000:0000:0000:0000:0000\n")
    tree.link(f"/sys/class/infiniband/{name}", path)
    verbs = f"{dev_path}/infiniband_verbs/{uverbs}"
    tree.write(f"{verbs}/ibdev", f"{name}\n")
    tree.write(f"{verbs}/abi_version", "1\n")
    tree.link(f"/sys/class/infiniband_verbs/{uverbs}", verbs)
    tree.write(f"/dev/infiniband/{uverbs}", "")


def mapped_gid(a, b, c, d):
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def link_local_gid(n):
    return f"fe80:0000:0000:0000:a288:c2ff:fe{n:02x}:{0x10 + n:04x}"


MODULES = [
    ("nvidia_peermem", 16384, 0, "-", " (OE)"),
    ("nvidia_uvm", 2076672, 4, "-", " (OE)"),
    ("nvidia", 14376960, 120, "nvidia_uvm,nvidia_peermem,", " (OE)"),
    ("mlx5_ib", 483328, 0, "-", ""),
    ("ib_uverbs", 200704, 3, "nvidia_peermem,mlx5_ib,", ""),
    ("ib_core", 462848, 4, "ib_uverbs,mlx5_ib,", ""),
    ("mlx5_core", 2490368, 1, "mlx5_ib,", ""),
]


def common_files(tree, hostname, osrelease, driver_version):
    tree.write("/proc/driver/nvidia/version",
               "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
               f"{driver_version}  Release Build  (dvs-builder@U22-I3-AE18-23-3)  "
               "Tue Oct 28 09:12:41 UTC 2025\n"
               "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")
    tree.write("/proc/driver/nvidia/params",
               "ResmanDebugLevel: 4294967295\n"
               "EnableStreamMemOPs: 1\n"
               "EnableGpuFirmware: 18\n"
               "RegistryDwords: \"PeerMappingOverride=1;\"\n"
               "RegistryDwordsPerDevice: \"\"\n")
    tree.write("/proc/modules", "".join(
        f"{name} {size} {refs} {deps} Live 0x0000000000000000{taint}\n"
        for name, size, refs, deps, taint in MODULES))
    for name, _, refs, _, _ in MODULES:
        tree.write(f"/sys/module/{name}/refcnt", f"{refs}\n")
    tree.write("/sys/module/nvidia/version", f"{driver_version}\n")
    tree.write("/proc/sys/kernel/osrelease", f"{osrelease}\n")
    tree.write("/proc/self/status",
               "Name:\tepkit\nState:\tR (running)\nPid:\t4242\n"
               "CapInh:\t0000000000000000\nCapPrm:\t00000000a80465fb\n"
               "CapEff:\t00000000a80465fb\nCapBnd:\t00000000a80465fb\n"
               "CapAmb:\t0000000000000000\n")
    rows = [("Max cpu time", "unlimited", "unlimited", "seconds"),
            ("Max file size", "unlimited", "unlimited", "bytes"),
            ("Max open files", "1048576", "1048576", "files"),
            ("Max locked memory", "unlimited", "unlimited", "bytes"),
            ("Max address space", "unlimited", "unlimited", "bytes")]
    tree.write("/proc/self/limits",
               f"{'Limit':<26}{'Soft Limit':<21}{'Hard Limit':<21}{'Units':<10}\n" +
               "".join(f"{a:<26}{b:<21}{c:<21}{d:<10}\n" for a, b, c, d in rows))
    tree.write("/proc/self/mounts",
               "overlay / overlay rw,relatime,lowerdir=/l,upperdir=/u,workdir=/w 0 0\n"
               "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
               "sysfs /sys sysfs ro,nosuid,nodev,noexec,relatime 0 0\n"
               "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=67108864k 0 0\n")
    tree.write("/etc/hostname", f"{hostname}\n")
    tree.write("/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
    tree.write("/etc/ld.so.conf.d/nvidia.conf", "/usr/local/nvidia/lib64\n")
    tree.write("/dev/infiniband/rdma_cm", "")
    tree.write("/sys/class/infiniband_verbs/abi_version", "6\n")


def make_gke_a4(root):
    """GKE A4: 8 B200, 8 CX-7 RoCE NICs, 4 switches each with 2 GPUs + 2 NICs."""
    tree = Tree(root)
    pci = PciBuilder(tree)
    driver = "580.126.09"
    # gVNIC management NICs on the first root complex.
    root0 = "/sys/devices/pci0000:00"
    for n, slot in enumerate((4, 5)):
        dev = pci.device(root0, bdf(0, slot), GOOGLE, 0x0042, CLASS_ETHERNET, 0, speed="Unknown",
                         width=0, driver="gve")
        netdev(tree, dev, f"eth{n}", f"42:01:0a:80:00:{n + 2:02x}", 8244)
    virtual_netdev(tree, "lo", "00:00:00:00:00:00", 65536)
    for s, root_bus in enumerate((0x10, 0x30, 0x90, 0xB0)):
        numa = 0 if s < 2 else 1
        ports = pci.switch(root_bus, numa, 4)
        for k in range(2):
            g = 2 * s + k
            gpu(pci, tree, ports[k], bdf(root_bus + 3 + k), 0x2901, numa, g, driver)
        for k in range(2):
            n = 2 * s + k
            dev = pci.device(ports[2 + k], bdf(root_bus + 5 + k), MELLANOX, 0x1021,
                             CLASS_ETHERNET, numa, driver="mlx5_core")
            eth = f"eth{n + 2}"
            netdev(tree, dev, eth, f"06:8a:{n:02x}:00:00:01", 8896)
            ip = (10, 128 + n, 0, 2)
            gids = [(0, link_local_gid(n), "IB/RoCE v1", eth),
                    (1, link_local_gid(n), "RoCE v2", eth),
                    (2, mapped_gid(*ip), "IB/RoCE v1", eth),
                    (3, mapped_gid(*ip), "RoCE v2", eth)]
            ib_device(tree, dev, f"mlx5_{n}", f"uverbs{n}", f"a088:c203:00{n:02x}:1000",
                      "Ethernet", "400 Gb/sec (4X NDR)", gids)
    tree.write("/sys/class/dmi/id/sys_vendor", "Google\n")
    tree.write("/sys/class/dmi/id/product_name", "Google Compute Engine\n")
    common_files(tree, "gke-a4-highgpu-8g-node-0", "6.14.0-1021-gcp", driver)


def make_dgx_h100(root):
    """DGX H100: 8 H100 SXM + 4 NVSwitches, 8 IB compute NICs (one per GPU
    switch), 2 Ethernet storage NICs and a bond on their own switch."""
    tree = Tree(root)
    pci = PciBuilder(tree)
    driver = "570.172.08"
    root0 = "/sys/devices/pci0000:00"
    dev = pci.device(root0, bdf(0, 0x1F, 6), INTEL, 0x1533, CLASS_ETHERNET, 0, speed="2.5 GT/s PCIe",
                     width=1, driver="igb")
    netdev(tree, dev, "eno1", "7c:c2:55:00:00:01", 1500)
    virtual_netdev(tree, "lo", "00:00:00:00:00:00", 65536)
    for g, root_bus in enumerate((0x10, 0x20, 0x30, 0x40, 0x90, 0xA0, 0xB0, 0xC0)):
        numa = 0 if g < 4 else 1
        ports = pci.switch(root_bus, numa, 2)
        gpu(pci, tree, ports[0], bdf(root_bus + 3), 0x2330, numa, g, driver)
        nic = pci.device(ports[1], bdf(root_bus + 4), MELLANOX, 0x1021, CLASS_INFINIBAND, numa,
                         driver="mlx5_core")
        netdev(tree, nic, f"ibp{root_bus + 4}s0", f"00:00:10:49:fe:80:00:00:00:00:00:00:a0:88:"
               f"c2:03:00:{g:02x}:20:00", 4092)
        gids = [(0, link_local_gid(g), "IB/RoCE v1", "")]
        ib_device(tree, nic, f"mlx5_{g}", f"uverbs{g}", f"a088:c203:00{g:02x}:2000",
                  "InfiniBand", "400 Gb/sec (4X NDR)", gids)
    # NVSwitches: one root complex of their own, one root port each.
    root_ns = "/sys/devices/pci0000:05"
    for i in range(4):
        rp = pci.device(root_ns, bdf(0x05, 1 + i), INTEL, 0x352A, CLASS_BRIDGE, 0)
        pci.device(rp, bdf(0x06 + i), NVIDIA, 0x22A3, CLASS_NVSWITCH, 0, speed="16.0 GT/s PCIe",
                   width=2, driver="nvidia")
    # Storage: two Ethernet CX-7 ports on one switch, and their LAG bond.
    ports = pci.switch(0xD0, 1, 2)
    for k in range(2):
        address = bdf(0xD3 + k)
        dev = pci.device(ports[k], address, MELLANOX, 0x1021, CLASS_ETHERNET, 1,
                         driver="mlx5_core")
        eth = f"enp{0xD3 + k}s0np0"
        netdev(tree, dev, eth, f"b8:3f:d2:00:00:{k:02x}", 9000)
        ip = (192, 168, 50, 10 + k)
        gids = [(0, link_local_gid(0x40 + k), "IB/RoCE v1", eth),
                (1, link_local_gid(0x40 + k), "RoCE v2", eth),
                (2, mapped_gid(*ip), "IB/RoCE v1", eth),
                (3, mapped_gid(*ip), "RoCE v2", eth)]
        ib_device(tree, dev, f"mlx5_{8 + k}", f"uverbs{8 + k}", f"b83f:d203:0000:00{k:02x}",
                  "Ethernet", "200 Gb/sec (2X NDR)", gids)
    bond_dev = pci.device(ports[0], bdf(0xD3, 0, 1), MELLANOX, 0x1021, CLASS_ETHERNET, 1,
                          driver="mlx5_core")
    virtual_netdev(tree, "bond0", "b8:3f:d2:00:00:00", 9000, operstate="up")
    ip = (192, 168, 50, 20)
    gids = [(0, link_local_gid(0x50), "IB/RoCE v1", "bond0"),
            (1, link_local_gid(0x50), "RoCE v2", "bond0"),
            (2, mapped_gid(*ip), "IB/RoCE v1", "bond0"),
            (3, mapped_gid(*ip), "RoCE v2", "bond0")]
    ib_device(tree, bond_dev, "mlx5_bond_0", "uverbs10", "b83f:d203:0000:0010", "Ethernet",
              "400 Gb/sec (4X NDR)", gids)
    tree.write("/sys/class/dmi/id/sys_vendor", "NVIDIA\n")
    tree.write("/sys/class/dmi/id/product_name", "DGXH100\n")
    common_files(tree, "dgx-h100-node-0", "5.15.0-1063-nvidia", driver)


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(here, "examples"))
    args = parser.parse_args()
    for name, make in (("gke-a4", make_gke_a4), ("dgx-h100", make_dgx_h100)):
        root = os.path.join(args.out, name)
        # Only the tree folders are regenerated; other files beside them stay.
        for entry in ("sys", "proc", "dev", "etc"):
            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)
        make(root)
        print(f"wrote {root}")


if __name__ == "__main__":
    main()
