//! A small, hand-written generic-netlink client with the two families ncdevmem needs:
//! [`netdev`] (queues, NAPI, page pools, devmem `bind-rx` / `bind-tx`) and [`ethtool`]
//! (channels, rings with header split).
//!
//! # Pieces
//!
//! * [`NlSocket`]: an `AF_NETLINK`/`NETLINK_GENERIC` socket with `NETLINK_EXT_ACK` and
//!   `NETLINK_CAP_ACK` set. [`NlSocket::request`] is the one send/receive path: it adds
//!   `NLM_F_REQUEST | NLM_F_ACK`, checks sequence number and port id of every answer, collects
//!   `do` replies up to the ACK and dump parts up to `NLMSG_DONE`, and refuses truncated
//!   datagrams.
//! * [`GenlRequest`] + [`AttrWriter`]: a request and its attributes. The writer pads to 4 bytes,
//!   sets `NLA_F_NESTED` on nests and remembers the path of every attribute by offset.
//! * Errors: a kernel refusal becomes [`crate::Error::Netlink`] holding [`crate::error::NlError`]
//!   with errno, the extended-ack message, the offending attribute as a path of *our* request
//!   (`NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE`) and the missing attribute, e.g.
//!   `netdev bind-rx on eth0 (ifindex 4), queues 8..=9: ERANGE (Numerical result out of
//!   range); kernel: "integer out of range"; at NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE`.
//! * [`AttrIter`] / [`Attr`]: parsing that never panics on arbitrary bytes; malformed
//!   lengths are [`crate::Error::Decode`]. Each attribute set decoded into a struct is one
//!   table (`attr_struct!`) giving its constants and a struct whose `from_attrs` skips unknown
//!   attributes; nlctrl's nests, read by hand, take their constants from `kernel_names!`.
//! * [`resolve_family`]: `CTRL_CMD_GETFAMILY` (family id, version, multicast groups). A missing
//!   family is `ENOENT`, which `caps::skip_if_family_missing` (policy, above this
//!   layer) turns into a skip.
//!
//! # Example
//!
//! ```no_run
//! use ncdevmem::caps::skip_if_family_missing;
//! use ncdevmem::netlink::netdev::Netdev;
//!
//! let mut nd = skip_if_family_missing(Netdev::open(), "netdev")?;
//! for q in nd.queue_get_dump(4)? {
//!     println!("{:?} queue {} dmabuf {:?}", q.queue_type, q.id, q.dmabuf);
//! }
//! # Ok::<(), ncdevmem::Error>(())
//! ```
//!
//! A devmem binding ([`netdev::DmabufBinding`]) owns its own socket: the kernel ties the
//! binding to the socket that created it and unbinds when that socket closes, so dropping the
//! binding unbinds.
//!
//! References: include/uapi/linux/netlink.h, genetlink.h, netdev.h,
//! ethtool_netlink_generated.h; <https://docs.kernel.org/userspace-api/netlink/intro.html>.

pub(crate) mod attr;
pub mod ctrl;
pub mod ethtool;
pub mod netdev;
pub(crate) mod socket;

pub use attr::{Attr, AttrIter, AttrWriter};
pub use ctrl::{is_family_missing, resolve_family, Family, McastGroup};
pub use socket::{GenlReply, GenlRequest, NlSocket};

/// `"eth0 (ifindex 4)"`, or `"ifindex 4"` when the name is unknown; used in error targets.
/// Without `ifname`, the name is looked up (`if_indextoname`) in the calling thread's network
/// namespace.
pub(crate) fn dev_label(ifindex: u32, ifname: Option<&str>) -> String {
    match ifname {
        Some(n) => format!("{n} (ifindex {ifindex})"),
        // nix 0.32 answers an unknown index with Ok(""), not an error.
        None => match nix::net::if_::if_indextoname(ifindex) {
            Ok(n) if !n.is_empty() => format!("{} (ifindex {ifindex})", n.to_string_lossy()),
            _ => format!("ifindex {ifindex}"),
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dev_label_of_an_unknown_index_is_the_number() {
        assert_eq!(super::dev_label(4, Some("eth0")), "eth0 (ifindex 4)");
        // No interface has index u32::MAX; nix answers Ok("") for it.
        assert_eq!(super::dev_label(u32::MAX, None), "ifindex 4294967295");
    }
}
