"""qemu's command line for a guest with a replay topology (``tests.policies.replay.vm``).

The same topology the in-process replays write as a synthetic sysfs becomes qemu's sockets,
cores, threads and NUMA nodes, so the guest kernel shows what the replay assumed (the node
suite checks that it does). As upstream's ``topology2qemuopts.py``: one memory backend per
node, each CPU node's cores listed with ``-numa cpu``, memory-only nodes without CPUs, every
node distance given.

The accelerator is TCG unless the host has a real KVM (``kvm_intel``/``kvm_amd`` loaded):
this machine kind's ``/dev/kvm`` is a software hypervisor that cannot boot stock kernels.
Under TCG ``-cpu max`` claims AMD without ``topoext`` (no SMT threads, odd cache ids), so
the vendor is set to Intel: threads, and one L3 per socket, as upstream's VMs show.

No network device of any kind: ``-nodefaults`` and ``-nic none``. The host reaches the
guest through a virtio-serial port (a unix socket on the host) and a read-only 9p share.
"""

from __future__ import annotations

from pathlib import Path

from tests.node.image import GuestImage
from tests.policies.replay.vm import VmTopology

AGENT_PORT = "nri-resmgr.agent"
SHARE_TAG = "host"
KERNEL_ARGS = (
    "console=ttyS0",
    "root=/dev/vda",
    "rw",
    "init=/sbin/guest_init.sh",
    "cgroup_no_v1=all",
    "panic=-1",
    "loglevel=4",
)


def has_kvm() -> bool:
    return any(Path(f"/sys/module/{m}").exists() for m in ("kvm_intel", "kvm_amd"))


def accelerator() -> list[str]:
    if has_kvm():
        return ["-accel", "kvm", "-cpu", "host"]
    return ["-accel", "tcg,thread=multi", "-cpu", "max,vendor=GenuineIntel"]


def smp(topo: VmTopology) -> str:
    threads = max(len(c.siblings) for c in topo.cpus)
    sockets = len({c.package for c in topo.cpus})
    dies = len({c.die for c in topo.cpus})
    cores = len(topo.cpus) // (sockets * dies * threads)
    return f"cpus={len(topo.cpus)},sockets={sockets},dies={dies},cores={cores},threads={threads}"


def numa(topo: VmTopology) -> list[str]:
    args: list[str] = []
    threads = max(len(c.siblings) for c in topo.cpus)
    cores_per_die = len(topo.cpus) // threads // len({(c.package, c.die) for c in topo.cpus})
    for n in topo.nodes:
        mib = topo.node_memory[n] >> 20
        args += ["-object", f"memory-backend-ram,size={mib}M,id=mem{n}"]
        args += ["-numa", f"node,nodeid={n},memdev=mem{n}"]
    multi_die = len({c.die for c in topo.cpus}) > 1  # qemu refuses die-id otherwise
    placed: set[tuple[int, int, int]] = set()
    for c in topo.cpus:
        core = (c.id // threads) % cores_per_die
        where = (c.package, c.die, core)
        if where not in placed:
            placed.add(where)
            die = f",die-id={c.die}" if multi_die else ""
            args += ["-numa", f"cpu,node-id={c.node},socket-id={c.package}{die},core-id={core}"]
    for a in topo.nodes:
        for b in topo.nodes:
            if a != b:
                args += ["-numa", f"dist,src={a},dst={b},val={topo.distances[a][b]}"]
    return args


def qemu_argv(
    topo: VmTopology, image: GuestImage, share: Path, agent_socket: Path, console: Path
) -> list[str]:
    memory_mib = sum(topo.node_memory.values()) >> 20
    return [
        "qemu-system-x86_64",
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-nic", "none",
        "-machine", "q35",
        *accelerator(),
        "-smp", smp(topo),
        "-m", f"{memory_mib}M",
        *numa(topo),
        "-kernel", str(image.kernel),
        "-initrd", str(image.initrd),
        "-append", " ".join(KERNEL_ARGS),
        "-drive", f"file={image.rootfs},format=raw,if=virtio,snapshot=on",
        "-virtfs", f"local,path={share},mount_tag={SHARE_TAG},security_model=none,readonly=on",
        "-device", "virtio-serial-pci",
        "-chardev", f"socket,id=agent,path={agent_socket},server=on,wait=off",
        "-device", f"virtserialport,chardev=agent,name={AGENT_PORT}",
        "-serial", f"file:{console}",
    ]  # fmt: skip
