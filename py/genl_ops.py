"""Which commands a generic netlink family offers, asked of the running kernel.

One ``CTRL_CMD_GETFAMILY`` request (``nlctrl``, ``include/uapi/linux/genetlink.h``)
for a family name; the reply's ``CTRL_ATTR_OPS`` nest lists one nest per
command with its ``CTRL_ATTR_OP_ID``.  Used to tell whether the kernel has
netkit queue leasing (the netdev family's ``queue-create``) before a test
changes anything.  Read-only; standard library only.
"""

import errno
import os
import socket
import struct

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10  # nlctrl's family id (NLMSG_MIN_TYPE)
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_NAME = 2
CTRL_ATTR_OPS = 6
CTRL_ATTR_OP_ID = 1
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 2
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER

# include/uapi/linux/netdev.h (kernel 7.3): NETDEV_CMD_QUEUE_CREATE, netkit queue leasing.
NETDEV_CMD_QUEUE_CREATE = 16


class GenlError(Exception):
    """The kernel refused or answered something unparsable; ``errno`` is set
    when it refused (ENOENT: no such family)."""

    def __init__(self, message, err=None):
        super().__init__(message)
        self.errno = err


def _attrs(buf):
    """(type, payload) for each netlink attribute in ``buf``."""
    off = 0
    while off + 4 <= len(buf):
        nla_len, nla_type = struct.unpack_from("=HH", buf, off)
        if nla_len < 4 or off + nla_len > len(buf):
            raise GenlError(f"malformed attribute at offset {off} (length {nla_len})")
        yield nla_type & NLA_TYPE_MASK, buf[off + 4 : off + nla_len]
        off += (nla_len + 3) & ~3


def getfamily_request(name, seq=1):
    """The ``CTRL_CMD_GETFAMILY`` message (bytes) asking for family ``name``."""
    value = name.encode() + b"\0"
    attr = struct.pack("=HH", 4 + len(value), CTRL_ATTR_FAMILY_NAME) + value
    attr += b"\0" * (-len(attr) % 4)
    payload = struct.pack("=BBH", CTRL_CMD_GETFAMILY, 1, 0) + attr
    return struct.pack("=IHHII", 16 + len(payload), GENL_ID_CTRL, NLM_F_REQUEST, seq, 0) + payload


def parse_ops(reply):
    """The set of command ids in a ``CTRL_CMD_GETFAMILY`` reply (bytes: one
    netlink message).  Raises GenlError for an error message (with its errno)
    or a malformed one."""
    if len(reply) < 16:
        raise GenlError(f"short netlink reply ({len(reply)} bytes)")
    msg_len, msg_type = struct.unpack_from("=IH", reply, 0)
    if msg_type == NLMSG_ERROR:
        (err,) = struct.unpack_from("=i", reply, 16) if len(reply) >= 20 else (-errno.EIO,)
        raise GenlError(f"CTRL_CMD_GETFAMILY: {os.strerror(-err)}", -err)
    if msg_len > len(reply) or msg_len < 20:
        raise GenlError(f"netlink message length {msg_len} of a {len(reply)}-byte reply")
    ops = set()
    for kind, value in _attrs(reply[20:msg_len]):
        if kind != CTRL_ATTR_OPS:
            continue
        for _, op in _attrs(value):
            for okind, ovalue in _attrs(op):
                if okind == CTRL_ATTR_OP_ID and len(ovalue) >= 4:
                    ops.add(struct.unpack_from("=I", ovalue)[0])
    return ops


def family_ops(name, timeout=5.0):
    """The command ids generic netlink family ``name`` offers in this network
    namespace's kernel.  Raises GenlError (errno ENOENT: no such family) or
    OSError (no netlink socket)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC) as sock:
        sock.settimeout(timeout)
        sock.sendto(getfamily_request(name), (0, 0))
        return parse_ops(sock.recv(65536))


def queue_lease_missing():
    """Why netkit queue leasing cannot be used here (a sentence), or None when
    the netdev family has ``queue-create``."""
    try:
        ops = family_ops("netdev")
    except (GenlError, OSError) as exc:
        return f"netkit queue leasing is missing: cannot read the netdev family's commands ({exc})"
    if NETDEV_CMD_QUEUE_CREATE not in ops:
        return (
            "netkit queue leasing is missing: the kernel's netdev family has no queue-create "
            f"(NETDEV_CMD_QUEUE_CREATE = {NETDEV_CMD_QUEUE_CREATE}; commands {sorted(ops)})"
        )
    return None
