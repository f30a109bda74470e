//! What the running kernel's netdev `bind-rx` and `bind-tx` accept, from their `do` policies
//! (nlctrl `CTRL_CMD_GETPOLICY`, [`crate::netlink::ctrl::parse_op_policy`]): whether
//! `rx-page-size` is known, and the number of the autorelease attribute if there is one. The
//! questions are the netdev family's; nlctrl only carries the answer, so they live here and
//! `ctrl` names no netdev attribute.

use super::{NETDEV_A_DMABUF_ID, NETDEV_A_DMABUF_RX_PAGE_SIZE, NETDEV_CMD_BIND_TX};
use crate::error::Result;
use crate::netlink::ctrl::{
    getpolicy_request, parse_op_policy, PolicyAttr, NL_ATTR_TYPE_U32, NL_ATTR_TYPE_U8,
};
use crate::netlink::socket::NlSocket;

/// `NETDEV_CMD_BIND_RX` (netdev.yaml; 13 in 6.18 BTF), the op whose policy tells whether the
/// kernel knows `rx-page-size`.
pub const NETDEV_CMD_BIND_RX: u32 = 13;
/// Whether a bind-rx policy (from [`bind_rx_policy`]) has `rx-page-size`: attribute 5 typed
/// u32 (or untyped). Attribute 5 typed u8 is the autorelease series' attribute instead (see
/// [`autorelease_attr`]).
pub fn has_rx_page_size(policy: &[PolicyAttr]) -> bool {
    policy.iter().any(|a| {
        a.kind == NETDEV_A_DMABUF_RX_PAGE_SIZE && a.nl_type.is_none_or(|t| t == NL_ATTR_TYPE_U32)
    })
}

/// The number of the bind-rx autorelease attribute (`NETDEV_A_DMABUF_AUTORELEASE`, u8) in a
/// bind-rx policy, or `None` when the kernel has none.
///
/// The attribute comes from the unmerged series "net: devmem: improve cpu cost of RX token
/// management" v7–v10 (2025-11 .. 2026-01), where it follows `NETDEV_A_DMABUF_ID` (4) as
/// number 5, type u8 (netdev-genl-gen.c policy `NLA_U8`, maxattr 5). Merged net-next gave 5 to
/// `rx-page-size` (u32) instead, so the number alone proves nothing: this looks at the type.
/// Accepted: 5 typed u8 (the series as posted), or 6 typed u8 while 5 is `rx-page-size` (the
/// series rebased after rx-page-size; **UNVERIFIED**, no such posting seen). Anything else,
/// including an untyped 5, is "no autorelease".
pub fn autorelease_attr(policy: &[PolicyAttr]) -> Option<u16> {
    let typed = |kind: u16, t: u32| {
        policy
            .iter()
            .any(|a| a.kind == kind && a.nl_type == Some(t))
    };
    let next = NETDEV_A_DMABUF_ID + 1;
    if typed(next, NL_ATTR_TYPE_U8) {
        Some(next)
    } else if typed(next, NL_ATTR_TYPE_U32) && typed(next + 1, NL_ATTR_TYPE_U8) {
        Some(next + 1)
    } else {
        None
    }
}

/// The running kernel's netdev `bind-rx` `do` policy with attribute types (a
/// `CTRL_CMD_GETPOLICY` dump on a fresh socket). 6.18 and 7.3 answer 1 (ifindex, u32), 2
/// (queues, nested), 3 (fd, u32). Needs no privilege.
///
/// Errors: `Error::Netlink` ENOENT when the kernel has no netdev family; socket and decode
/// errors.
pub fn bind_rx_policy() -> Result<Vec<PolicyAttr>> {
    let mut sock = NlSocket::open()?;
    let replies = sock.request(&getpolicy_request("netdev", NETDEV_CMD_BIND_RX))?;
    parse_op_policy(&replies, NETDEV_CMD_BIND_RX)
}

/// The running kernel's netdev `bind-tx` `do` policy with attribute types (devmem TX, 6.16+;
/// a `CTRL_CMD_GETPOLICY` dump on a fresh socket). Needs no privilege.
///
/// Errors: `Error::Netlink` ENOENT from nlctrl when the kernel has no netdev family or the
/// family no bind-tx op; socket and decode errors.
pub fn bind_tx_policy() -> Result<Vec<PolicyAttr>> {
    let mut sock = NlSocket::open()?;
    let replies = sock.request(&getpolicy_request("netdev", u32::from(NETDEV_CMD_BIND_TX)))?;
    parse_op_policy(&replies, u32::from(NETDEV_CMD_BIND_TX))
}

/// Asks the kernel which attributes netdev `bind-rx` accepts (its `do` policy, through a
/// `CTRL_CMD_GETPOLICY` dump on a fresh socket), ascending. 6.18 answers `[1, 2, 3]`
/// (ifindex, queues, fd); kernels with large niovs add 5 (`rx-page-size`, see
/// [`NETDEV_A_DMABUF_RX_PAGE_SIZE`]). Needs no privilege.
///
/// Errors: `Error::Netlink` ENOENT when the kernel has no netdev family; socket and decode
/// errors.
#[cfg(test)]
pub fn bind_rx_policy_attrs() -> Result<Vec<u16>> {
    Ok(bind_rx_policy()?.iter().map(|a| a.kind).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::netlink::ctrl::{is_family_missing, policy_replies_with};
    use std::os::fd::{AsFd, BorrowedFd};

    /// The series' u8 attribute and merged net-next's u32 rx-page-size share number 5: only
    /// the type in the policy dump tells them apart.
    #[test]
    fn autorelease_is_told_from_rx_page_size_by_type() {
        let pol = |extra: &[(u16, u32)]| parse_op_policy(&policy_replies_with(extra), 13).unwrap();
        let base = pol(&[]);
        assert_eq!(
            base[0],
            PolicyAttr {
                kind: 1,
                nl_type: Some(NL_ATTR_TYPE_U32)
            }
        );
        assert_eq!(base[1].nl_type, Some(13), "nested queues");
        assert_eq!(
            (autorelease_attr(&base), has_rx_page_size(&base)),
            (None, false)
        );
        // Series v7–v10 as posted: 5 = autorelease, u8.
        let series = pol(&[(5, NL_ATTR_TYPE_U8)]);
        assert_eq!(
            (autorelease_attr(&series), has_rx_page_size(&series)),
            (Some(5), false)
        );
        // Merged net-next: 5 = rx-page-size, u32.
        let nn = pol(&[(5, NL_ATTR_TYPE_U32)]);
        assert_eq!((autorelease_attr(&nn), has_rx_page_size(&nn)), (None, true));
        // Both (the series rebased after rx-page-size): 6 = autorelease.
        let both = pol(&[(5, NL_ATTR_TYPE_U32), (6, NL_ATTR_TYPE_U8)]);
        assert_eq!(
            (autorelease_attr(&both), has_rx_page_size(&both)),
            (Some(6), true)
        );
        // A u8 at 6 without rx-page-size at 5, or a u32 at 6, is not the series' attribute.
        assert_eq!(autorelease_attr(&pol(&[(6, NL_ATTR_TYPE_U8)])), None);
        assert_eq!(
            autorelease_attr(&pol(&[(5, NL_ATTR_TYPE_U32), (6, 4)])),
            None
        );
        // An untyped 5 counts as rx-page-size (the old probe's answer), never as autorelease.
        let untyped = [PolicyAttr {
            kind: 5,
            nl_type: None,
        }];
        assert_eq!(
            (autorelease_attr(&untyped), has_rx_page_size(&untyped)),
            (None, true)
        );
    }

    /// The running kernel's bind-rx policy, or `None` (a skip, printed) when it has no
    /// netdev family; any other error fails.
    fn policy_or_skip(test: &str) -> Option<Vec<PolicyAttr>> {
        match bind_rx_policy() {
            Ok(policy) => Some(policy),
            Err(e) if is_family_missing(&e) => {
                println!("skip: {test}: this kernel has no netdev family: {e}");
                None
            }
            Err(e) => panic!("the kernel's bind-rx policy could not be read: {e}"),
        }
    }

    /// The running kernel's refusal of bind-rx `req(fd)` on `lo` with `/dev/null` as the
    /// dma-buf (it binds nothing: lo has no queue management), and whether that refusal is
    /// EINVAL "Unknown attribute type"; `None` (a skip, printed) without CAP_NET_ADMIN.
    fn refusal_on_lo(
        test: &str,
        req: impl FnOnce(BorrowedFd<'_>) -> crate::netlink::netdev::BindRxRequest,
    ) -> Option<(Error, bool)> {
        let netdev = crate::netlink::netdev::Netdev::open().expect("open the netdev family");
        let fd = std::fs::File::open("/dev/null").expect("open /dev/null");
        let e = match netdev.bind_rx_request(&req(fd.as_fd())) {
            Ok(b) => panic!("bind-rx on lo succeeded (binding id {})", b.id()),
            Err(e) => e,
        };
        if e.errno() == Some(libc::EPERM) {
            println!("skip: {test}: cross-check needs CAP_NET_ADMIN: {e}");
            return None;
        }
        let unknown = matches!(&e, Error::Netlink(nl)
            if nl.errno == libc::EINVAL
                && nl.ext_msg.as_deref() == Some("Unknown attribute type"));
        Some((e, unknown))
    }

    /// Real kernel: the running kernel's bind-rx policy (no privilege needed), checked
    /// against what the same kernel does with the attribute: a bind-rx naming rx-page-size
    /// (attribute 5) on `lo` is refused with EINVAL "Unknown attribute type" exactly when the
    /// policy lacks attribute 5 (6.18, this machine, lacks it). Only a kernel without the
    /// netdev family is a skip; any other error fails (a test that cannot fail proves
    /// nothing).
    #[test]
    fn bind_rx_policy_of_this_kernel() {
        const TEST: &str = "bind_rx_policy_of_this_kernel";
        let Some(policy) = policy_or_skip(TEST) else {
            return;
        };
        let attrs: Vec<u16> = policy.iter().map(|a| a.kind).collect();
        println!("bind-rx policy attributes: {attrs:?}");
        assert!(attrs.starts_with(&[1, 2, 3]), "{attrs:?}");
        assert!(attrs.windows(2).all(|w| w[0] < w[1]), "{attrs:?}");
        let knows_rx_page_size = attrs.contains(&NETDEV_A_DMABUF_RX_PAGE_SIZE);
        let Some((e, unknown)) = refusal_on_lo(TEST, |fd| {
            crate::netlink::netdev::BindRxRequest::new(1, fd, &[0]).rx_page_size(Some(16384))
        }) else {
            return;
        };
        assert_eq!(
            unknown, !knows_rx_page_size,
            "policy {attrs:?}, but bind-rx with rx-page-size answered: {e}"
        );
    }

    /// Real kernel: the autorelease attribute as the running kernel's policy types it, checked
    /// against the kernel's answer to a bind-rx that carries it the way C ncdevmem of the
    /// series always does (number 5, u8 0) on `lo`: EINVAL "Unknown attribute type" exactly
    /// when the policy has no attribute 5 at all (6.18 here: policy [1, 2, 3], no
    /// autorelease, and the u8 is refused). A kernel whose 5 is rx-page-size (u32) refuses
    /// the 1-byte payload differently, and one with the series gets past validation.
    #[test]
    fn bind_rx_autorelease_of_this_kernel() {
        const TEST: &str = "bind_rx_autorelease_of_this_kernel";
        let Some(policy) = policy_or_skip(TEST) else {
            return;
        };
        println!("bind-rx policy: {policy:?}");
        for a in &policy[..3] {
            assert!(a.nl_type.is_some(), "6.12+ types every attribute: {a:?}");
        }
        assert_eq!(policy[0].nl_type, Some(NL_ATTR_TYPE_U32), "ifindex is u32");
        let ar = autorelease_attr(&policy);
        let has5 = policy.iter().any(|a| a.kind == 5);
        let Some((e, unknown)) = refusal_on_lo(TEST, |fd| {
            crate::netlink::netdev::BindRxRequest::new(1, fd, &[0]).autorelease(Some((5, false)))
        }) else {
            return;
        };
        println!("bind-rx on lo with attribute 5 = u8 0: {e}");
        assert_eq!(unknown, !has5, "policy {policy:?}, answer: {e}");
        if ar == Some(5) {
            // Past validation: lo has no queue management.
            assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
        } else if !has5 {
            assert!(
                e.to_string().ends_with("at NETDEV_A_DMABUF_AUTORELEASE"),
                "{e}"
            );
        }
    }
}
