#!/bin/sh
# PID 1 of the nri-resmgr test guest (no systemd): mount what the node needs, then run the
# agent from the host's 9p share under tini, which reaps the shims' orphans. The agent powers
# the guest off (sysrq 'o'); should it die instead, the kernel panics and qemu (-no-reboot)
# exits, so the host never waits on a guest that has nothing left to run.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mount -o remount,rw /
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mountpoint -q /run || mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
# cgroup v2 only (the kernel is booted with cgroup_no_v1=all), every controller delegated.
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
    echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
done
modprobe -q virtio_console 2>/dev/null
modprobe -q 9pnet_virtio 2>/dev/null
modprobe -q 9p 2>/dev/null
mkdir -p /mnt/host
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro host /mnt/host
# Loopback only: the guest has no network device at all.
ip link set lo up
hostname nri-node
echo "nri-node-init: starting the agent" > /dev/console
exec /usr/bin/tini -s -- /usr/bin/python3 /mnt/host/agent.py
