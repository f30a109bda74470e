//! Devmem bindings of the `netdev` family: `bind-rx` and `bind-tx` (netdev.yaml `dmabuf`
//! attribute set; <https://docs.kernel.org/networking/devmem.html>).
//!
//! The kernel keeps a binding on the private list of the netlink socket that created it and
//! unbinds when that socket closes; there is no unbind command. So every bind opens a fresh
//! [`NlSocket`] and the returned [`DmabufBinding`] owns it: dropping the binding unbinds.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use super::*;
use crate::error::Result;
use crate::netlink::attr::{attr_struct, put_attr, AttrWriter};
use crate::netlink::ctrl::Family;
use crate::netlink::dev_label;
use crate::netlink::socket::{GenlReply, GenlRequest, NlSocket};

attr_struct! {
    /// The scalar attributes of the `dmabuf` set (`NETDEV_A_DMABUF_*`, all u32) in bind-rx /
    /// bind-tx requests and replies; [`BindRxRequest`] writes the rest.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub(super) struct Dmabuf("netdev bind reply") {
        /// Interface index (min 1).
        NETDEV_A_DMABUF_IFINDEX = 1 => ifindex: opt u32,
        /// The dma-buf file descriptor.
        NETDEV_A_DMABUF_FD = 3 => fd: opt u32,
        /// The binding id (reply only).
        NETDEV_A_DMABUF_ID = 4 => id: opt u32,
    }
    also {
        NETDEV_A_DMABUF_QUEUES = 2,
        NETDEV_A_DMABUF_RX_PAGE_SIZE = 5,
    }
}

/// The contents of one `NETDEV_A_DMABUF_QUEUES` nest. Normally `{id, type rx}`; fields may be
/// left out on purpose (C ncdevmem's probe sends nests with neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueNest {
    /// `NETDEV_A_QUEUE_ID`, or nothing.
    pub id: Option<u32>,
    /// `NETDEV_A_QUEUE_TYPE` raw value, or nothing.
    pub queue_type: Option<u32>,
}

impl QueueNest {
    /// `{NETDEV_A_QUEUE_ID = id, NETDEV_A_QUEUE_TYPE = rx}`.
    pub fn rx(id: u32) -> Self {
        QueueNest {
            id: Some(id),
            queue_type: Some(NETDEV_QUEUE_TYPE_RX),
        }
    }

    /// A nest with no attributes inside.
    pub fn empty() -> Self {
        QueueNest {
            id: None,
            queue_type: None,
        }
    }

    fn emit(&self, w: &mut AttrWriter) {
        if let Some(id) = self.id {
            put_attr!(w, put_u32, NETDEV_A_QUEUE_ID, id);
        }
        if let Some(t) = self.queue_type {
            put_attr!(w, put_u32, NETDEV_A_QUEUE_TYPE, t);
        }
    }
}

/// A `bind-rx` request. Fields are public so callers (and the probe mode) can send
/// deliberately malformed requests; [`BindRxRequest::new`] builds the normal one.
///
/// Wire shape (attribute order as YNL sends it):
///
/// ```text
/// NETDEV_A_DMABUF_IFINDEX        u32
/// NETDEV_A_DMABUF_FD             u32
/// NETDEV_A_DMABUF_QUEUES         nest, repeated: one per queue
///   ├─ NETDEV_A_QUEUE_ID         u32  queue index
///   └─ NETDEV_A_QUEUE_TYPE       u32  0 (rx)
/// NETDEV_A_DMABUF_AUTORELEASE    u8   0/1, only when set (unmerged series; number probed)
/// NETDEV_A_DMABUF_RX_PAGE_SIZE   u32  bytes, only when set
/// ```
///
/// The autorelease attribute goes right after the queues, where YNL puts it (C ncdevmem of
/// the series calls `netdev_bind_rx_req_set_autorelease` on every bind, so YNL always sends
/// it; ncdevmem-rs sends it only to a kernel whose policy has it, see `app.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindRxRequest {
    /// Interface index.
    pub ifindex: u32,
    /// Interface name, for error messages only.
    pub ifname: Option<String>,
    /// The dma-buf fd number; `None` leaves the attribute out.
    pub fd: Option<u32>,
    /// One entry per `NETDEV_A_DMABUF_QUEUES` nest.
    pub queues: Vec<QueueNest>,
    /// Niov size in bytes (`NETDEV_A_DMABUF_RX_PAGE_SIZE`); `None` leaves it out (kernel
    /// default: the page size). Kernels before net-next 2026-08 reject the attribute.
    pub rx_page_size: Option<u32>,
    /// `NETDEV_A_DMABUF_AUTORELEASE` (attribute number, value); `None` leaves it out. Only
    /// kernels with the unmerged autorelease series know it; others answer EINVAL "Unknown
    /// attribute type".
    pub autorelease: Option<(u16, bool)>,
}

impl BindRxRequest {
    /// Binds `dmabuf_fd` to RX queues `rx_queues` (queue indices) of `ifindex`.
    pub fn new(ifindex: u32, dmabuf_fd: BorrowedFd<'_>, rx_queues: &[u32]) -> Self {
        BindRxRequest {
            ifindex,
            ifname: None,
            fd: u32::try_from(dmabuf_fd.as_raw_fd()).ok(),
            queues: rx_queues.iter().map(|&q| QueueNest::rx(q)).collect(),
            rx_page_size: None,
            autorelease: None,
        }
    }

    /// Sets or clears the autorelease attribute: `(attribute number, value)`.
    pub fn autorelease(mut self, attr: Option<(u16, bool)>) -> Self {
        self.autorelease = attr;
        self
    }

    /// Sets the interface name used in errors.
    pub fn ifname(mut self, name: &str) -> Self {
        self.ifname = Some(name.to_string());
        self
    }

    /// Sets or clears the niov size in bytes.
    pub fn rx_page_size(mut self, bytes: Option<u32>) -> Self {
        self.rx_page_size = bytes;
        self
    }

    /// Replaces the queue list with `n` empty nests (C ncdevmem's "binding empty queues array
    /// should have failed" probe).
    pub fn empty_queue_nests(mut self, n: usize) -> Self {
        self.queues = vec![QueueNest::empty(); n];
        self
    }

    /// Writes the request's attributes in wire order (see the type's docs).
    pub fn emit(&self, w: &mut AttrWriter) {
        let scalars = Dmabuf {
            ifindex: Some(self.ifindex),
            fd: self.fd,
            id: None,
        };
        scalars.emit(w);
        for q in &self.queues {
            let nest = put_attr!(w, begin_nest_indexed, NETDEV_A_DMABUF_QUEUES);
            q.emit(w);
            w.end_nest(nest);
        }
        if let Some((attr, on)) = self.autorelease {
            w.put_u8(attr, "NETDEV_A_DMABUF_AUTORELEASE", u8::from(on));
        }
        if let Some(s) = self.rx_page_size {
            put_attr!(w, put_u32, NETDEV_A_DMABUF_RX_PAGE_SIZE, s);
        }
    }

    /// What the request is about, for errors: `"eth0 (ifindex 4), queues 8..=9"`, plus
    /// `", rx-page-size 16384"` when the niov size is set.
    pub fn target(&self) -> String {
        let mut t = format!(
            "{}, {}",
            dev_label(self.ifindex, self.ifname.as_deref()),
            queues_label(&self.queues)
        );
        if let Some(s) = self.rx_page_size {
            t.push_str(&format!(", rx-page-size {s}"));
        }
        if let Some((_, on)) = self.autorelease {
            t.push_str(&format!(", autorelease {}", u8::from(on)));
        }
        t
    }

    /// The bind-rx request, labelled `target` (this request's [`target`](Self::target), which
    /// the caller keeps for the binding).
    fn genl(&self, family: &Family, target: String) -> GenlRequest {
        let mut req = family.request(NETDEV_CMD_BIND_RX, "bind-rx").target(target);
        self.emit(req.attrs());
        req
    }
}

fn queues_label(queues: &[QueueNest]) -> String {
    let ids: Option<Vec<u32>> = queues
        .iter()
        .map(|q| {
            (q.queue_type == Some(NETDEV_QUEUE_TYPE_RX))
                .then_some(q.id)
                .flatten()
        })
        .collect();
    match ids.as_deref() {
        _ if queues.is_empty() => "no queues".into(),
        Some([one]) => format!("queue {one}"),
        Some(ids) if ids.windows(2).all(|w| w[0].checked_add(1) == Some(w[1])) => {
            format!("queues {}..={}", ids[0], ids[ids.len() - 1])
        }
        Some(ids) => {
            let s: Vec<String> = ids.iter().map(u32::to_string).collect();
            format!("queues {}", s.join(","))
        }
        None if queues.iter().all(|q| *q == QueueNest::empty()) => {
            format!("{} empty queue nests", queues.len())
        }
        None => {
            let nests: Vec<String> = queues
                .iter()
                .map(|q| {
                    let mut f = Vec::new();
                    if let Some(id) = q.id {
                        f.push(format!("id {id}"));
                    }
                    if let Some(t) = q.queue_type {
                        f.push(format!("type {t}"));
                    }
                    format!("{{{}}}", f.join(", "))
                })
                .collect();
            format!("queue nests {}", nests.join(" "))
        }
    }
}

/// Which direction a [`DmabufBinding`] serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindingDirection {
    /// `bind-rx`: the NIC writes received payload into the dma-buf.
    Rx,
    /// `bind-tx`: the NIC sends payload from the dma-buf.
    Tx,
}

/// A devmem dma-buf binding. It owns the netlink socket that created it; dropping the binding
/// (or [`unbind`](Self::unbind)) closes that socket, and the kernel then unbinds: RX queues are
/// restarted without the memory provider and the dma-buf is detached.
#[derive(Debug)]
pub struct DmabufBinding {
    id: u32,
    direction: BindingDirection,
    ifindex: u32,
    target: String,
    sock: NlSocket,
}

impl DmabufBinding {
    /// The binding id (`NETDEV_A_DMABUF_ID`): what `dmabuf_cmsg.dmabuf_id` carries on RX,
    /// what `SCM_DEVMEM_DMABUF` carries on TX, and what queue-get / page-pool-get report.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// RX or TX.
    pub fn direction(&self) -> BindingDirection {
        self.direction
    }

    /// Interface index of the bound device.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// What was bound, e.g. `"eth0 (ifindex 4), queues 8..=9"`.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Unbinds now by closing the owning socket (the same as dropping the binding).
    pub fn unbind(self) {
        drop(self.sock);
    }
}

impl AsFd for DmabufBinding {
    /// The netlink socket that holds the binding.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

fn binding_id(replies: &[GenlReply], op: &str) -> Result<u32> {
    let what = format!("netdev {op} reply");
    let reply = replies
        .first()
        .ok_or_else(|| Error::decode(&what, "no reply message before the ACK"))?;
    Dmabuf::from_attrs(&reply.attrs)?
        .id
        .ok_or_else(|| Error::decode(&what, "NETDEV_A_DMABUF_ID is missing"))
}

impl Netdev {
    /// `bind-rx`: binds `dmabuf_fd` to RX queues `rx_queues` (queue indices) of `ifindex`,
    /// with niov size `rx_page_size` bytes when given. See
    /// [`bind_rx_request`](Self::bind_rx_request).
    #[doc(alias = "NETDEV_CMD_BIND_RX")]
    pub fn bind_rx(
        &self,
        ifindex: u32,
        dmabuf_fd: BorrowedFd<'_>,
        rx_queues: &[u32],
        rx_page_size: Option<u32>,
    ) -> Result<DmabufBinding> {
        self.bind_rx_request(
            &BindRxRequest::new(ifindex, dmabuf_fd, rx_queues).rx_page_size(rx_page_size),
        )
    }

    /// `bind-rx` with a prepared request, on a fresh socket that the returned binding owns.
    /// Needs CAP_NET_ADMIN. Available since 6.12.
    ///
    /// Errors (`Error::Netlink`, as measured on 6.18): EPERM without CAP_NET_ADMIN; EINVAL
    /// with a missing attribute number when ifindex (1), queues (2) or fd (3) is left out;
    /// ERANGE "integer out of range" for ifindex 0 or a queue type > 1; ENODEV for an
    /// unknown ifindex; EOPNOTSUPP at `NETDEV_A_DMABUF_IFINDEX` for a driver without queue
    /// management (veth, lo, virtio_net).
    #[doc(alias = "NETDEV_CMD_BIND_RX")]
    pub fn bind_rx_request(&self, req: &BindRxRequest) -> Result<DmabufBinding> {
        let mut sock = NlSocket::open()?;
        let target = req.target();
        let genl = req.genl(&self.family, target.clone());
        let replies = sock.request(&genl)?;
        let id = binding_id(&replies, "bind-rx")?;
        Ok(DmabufBinding {
            id,
            direction: BindingDirection::Rx,
            ifindex: req.ifindex,
            target,
            sock,
        })
    }

    /// `bind-tx`: binds `dmabuf_fd` for devmem TX on `ifindex`, on a fresh socket that the
    /// returned binding owns. Available since 6.16; no CAP_NET_ADMIN needed.
    ///
    /// Errors (`Error::Netlink`): EOPNOTSUPP "Driver does not support netmem TX" for drivers
    /// without netmem TX; ENODEV for an unknown ifindex.
    #[doc(alias = "NETDEV_CMD_BIND_TX")]
    pub fn bind_tx(&self, ifindex: u32, dmabuf_fd: BorrowedFd<'_>) -> Result<DmabufBinding> {
        let target = dev_label(ifindex, None);
        let mut genl = self
            .family
            .request(NETDEV_CMD_BIND_TX, "bind-tx")
            .target(target.clone());
        let scalars = Dmabuf {
            ifindex: Some(ifindex),
            fd: u32::try_from(dmabuf_fd.as_raw_fd()).ok(),
            id: None,
        };
        scalars.emit(genl.attrs());
        let mut sock = NlSocket::open()?;
        let replies = sock.request(&genl)?;
        let id = binding_id(&replies, "bind-tx")?;
        Ok(DmabufBinding {
            id,
            direction: BindingDirection::Tx,
            ifindex,
            target,
            sock,
        })
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::error::{Error, NlError};
    use crate::netlink::attr::AttrIter;
    use crate::netlink::socket::{Exchange, NLM_F_ACK_TLVS, NLM_F_CAPPED};

    /// Reads a bind-rx request's attributes back: the inverse of [`BindRxRequest::emit`]
    /// (`ifname` is not on the wire; a 1-byte attribute is the autorelease flag).
    fn decode_bind_rx(attrs: &[u8]) -> BindRxRequest {
        let scalars = Dmabuf::from_attrs(attrs).unwrap();
        let mut req = BindRxRequest {
            ifindex: scalars.ifindex.unwrap(),
            ifname: None,
            fd: scalars.fd,
            queues: Vec::new(),
            rx_page_size: None,
            autorelease: None,
        };
        for a in AttrIter::new(attrs).map(Result::unwrap) {
            match (a.kind(), a.payload().len()) {
                (NETDEV_A_DMABUF_QUEUES, _) => {
                    let mut q = QueueNest::empty();
                    for inner in a.nested().map(Result::unwrap) {
                        let v = Some(inner.u32("queue-id").unwrap());
                        match inner.kind() {
                            NETDEV_A_QUEUE_ID => q.id = v,
                            NETDEV_A_QUEUE_TYPE => q.queue_type = v,
                            k => panic!("queue-id attribute {k}"),
                        }
                    }
                    req.queues.push(q);
                }
                (k, 1) => req.autorelease = Some((k, a.u8("autorelease").unwrap() != 0)),
                (NETDEV_A_DMABUF_RX_PAGE_SIZE, _) => {
                    req.rx_page_size = Some(a.u32("rx-page-size").unwrap())
                }
                _ => {}
            }
        }
        req
    }

    fn unnamed(req: &BindRxRequest) -> BindRxRequest {
        BindRxRequest {
            ifname: None,
            ..req.clone()
        }
    }

    fn bind_rx_req(rx_page_size: Option<u32>) -> BindRxRequest {
        BindRxRequest {
            ifindex: 4,
            ifname: Some("eth0".into()),
            fd: Some(7),
            queues: vec![QueueNest::rx(8), QueueNest::rx(9)],
            rx_page_size,
            autorelease: None,
        }
    }

    /// bind-rx for ifindex 4, fd 7, RX queues 8 and 9, family id 20, seq 0x11223344, pid 0.
    /// Synthetic (no NIC here can take a bind); attribute order as YNL sends it (ifindex, fd,
    /// queues), which is what the offsets 6.18 reports imply (the first queue nest's type sits
    /// at 48; `docs/kernel-interface.md#bind-rx-and-bind-tx`).
    #[rustfmt::skip]
    const BIND_RX: &[u8] = &[
        0x4c, 0x00, 0x00, 0x00, // nlmsg_len 76
        0x14, 0x00,             // nlmsg_type 20 (netdev)
        0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
        0x44, 0x33, 0x22, 0x11, // seq 0x11223344
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x0d,                   // cmd 13 NETDEV_CMD_BIND_RX
        0x01,                   // version 1
        0x00, 0x00,             // reserved
        0x08, 0x00, 0x01, 0x00, // @20 nla_len 8, NETDEV_A_DMABUF_IFINDEX
        0x04, 0x00, 0x00, 0x00, //     ifindex 4
        0x08, 0x00, 0x03, 0x00, // @28 nla_len 8, NETDEV_A_DMABUF_FD
        0x07, 0x00, 0x00, 0x00, //     fd 7
        0x14, 0x00, 0x02, 0x80, // @36 nla_len 20, NETDEV_A_DMABUF_QUEUES | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, // @40   NETDEV_A_QUEUE_ID
        0x08, 0x00, 0x00, 0x00, //       queue 8
        0x08, 0x00, 0x03, 0x00, // @48   NETDEV_A_QUEUE_TYPE
        0x00, 0x00, 0x00, 0x00, //       0 (rx)
        0x14, 0x00, 0x02, 0x80, // @56 nla_len 20, NETDEV_A_DMABUF_QUEUES | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, // @60   NETDEV_A_QUEUE_ID
        0x09, 0x00, 0x00, 0x00, //       queue 9
        0x08, 0x00, 0x03, 0x00, // @68   NETDEV_A_QUEUE_TYPE
        0x00, 0x00, 0x00, 0x00, //       0 (rx)
    ];

    /// The same request with rx-page-size 16384 (synthetic; net-next 2026-08 attribute).
    #[rustfmt::skip]
    const BIND_RX_PAGE_SIZE: &[u8] = &[
        0x54, 0x00, 0x00, 0x00, // nlmsg_len 84
        0x14, 0x00,             // nlmsg_type 20 (netdev)
        0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
        0x44, 0x33, 0x22, 0x11, // seq 0x11223344
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x0d,                   // cmd 13 NETDEV_CMD_BIND_RX
        0x01,                   // version 1
        0x00, 0x00,             // reserved
        0x08, 0x00, 0x01, 0x00, // @20 nla_len 8, NETDEV_A_DMABUF_IFINDEX
        0x04, 0x00, 0x00, 0x00, //     ifindex 4
        0x08, 0x00, 0x03, 0x00, // @28 nla_len 8, NETDEV_A_DMABUF_FD
        0x07, 0x00, 0x00, 0x00, //     fd 7
        0x14, 0x00, 0x02, 0x80, // @36 nla_len 20, NETDEV_A_DMABUF_QUEUES | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, // @40   NETDEV_A_QUEUE_ID
        0x08, 0x00, 0x00, 0x00, //       queue 8
        0x08, 0x00, 0x03, 0x00, // @48   NETDEV_A_QUEUE_TYPE
        0x00, 0x00, 0x00, 0x00, //       0 (rx)
        0x14, 0x00, 0x02, 0x80, // @56 nla_len 20, NETDEV_A_DMABUF_QUEUES | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, // @60   NETDEV_A_QUEUE_ID
        0x09, 0x00, 0x00, 0x00, //       queue 9
        0x08, 0x00, 0x03, 0x00, // @68   NETDEV_A_QUEUE_TYPE
        0x00, 0x00, 0x00, 0x00, //       0 (rx)
        0x08, 0x00, 0x05, 0x00, // @76 nla_len 8, NETDEV_A_DMABUF_RX_PAGE_SIZE
        0x00, 0x40, 0x00, 0x00, //     16384 bytes
    ];

    #[test]
    fn bind_rx_with_rx_page_size_bytes() {
        let req = bind_rx_req(Some(16384));
        assert_eq!(encode_bind_rx(&req, 0x1122_3344), BIND_RX_PAGE_SIZE);
        assert_eq!(decode_bind_rx(&BIND_RX_PAGE_SIZE[20..]), unnamed(&req));
        let mut w = AttrWriter::new();
        req.emit(&mut w);
        assert_eq!(w.bytes(), &BIND_RX_PAGE_SIZE[20..]);
        assert_eq!(
            req.target(),
            "eth0 (ifindex 4), queues 8..=9, rx-page-size 16384"
        );
    }

    /// The request with the autorelease series' attribute (number 5, u8 1) after the queues,
    /// where YNL puts it (synthetic: no kernel here has the series).
    #[rustfmt::skip]
    const BIND_RX_AUTORELEASE: &[u8] = &[
        0x54, 0x00, 0x00, 0x00, // nlmsg_len 84
        0x14, 0x00,             // nlmsg_type 20 (netdev)
        0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
        0x44, 0x33, 0x22, 0x11, // seq 0x11223344
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x0d,                   // cmd 13 NETDEV_CMD_BIND_RX
        0x01,                   // version 1
        0x00, 0x00,             // reserved
        0x08, 0x00, 0x01, 0x00, // @20 nla_len 8, NETDEV_A_DMABUF_IFINDEX
        0x04, 0x00, 0x00, 0x00, //     ifindex 4
        0x08, 0x00, 0x03, 0x00, // @28 nla_len 8, NETDEV_A_DMABUF_FD
        0x07, 0x00, 0x00, 0x00, //     fd 7
        0x14, 0x00, 0x02, 0x80, // @36 nla_len 20, NETDEV_A_DMABUF_QUEUES | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, // @40   NETDEV_A_QUEUE_ID
        0x08, 0x00, 0x00, 0x00, //       queue 8
        0x08, 0x00, 0x03, 0x00, // @48   NETDEV_A_QUEUE_TYPE
        0x00, 0x00, 0x00, 0x00, //       0 (rx)
        0x14, 0x00, 0x02, 0x80, // @56 nla_len 20, NETDEV_A_DMABUF_QUEUES | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, // @60   NETDEV_A_QUEUE_ID
        0x09, 0x00, 0x00, 0x00, //       queue 9
        0x08, 0x00, 0x03, 0x00, // @68   NETDEV_A_QUEUE_TYPE
        0x00, 0x00, 0x00, 0x00, //       0 (rx)
        0x05, 0x00, 0x05, 0x00, // @76 nla_len 5, NETDEV_A_DMABUF_AUTORELEASE (5 in the series)
        0x01, 0x00, 0x00, 0x00, //     1, then 3 bytes of padding
    ];

    #[test]
    fn bind_rx_with_autorelease_bytes() {
        let req = bind_rx_req(None).autorelease(Some((5, true)));
        let bytes = encode_bind_rx(&req, 0x1122_3344);
        assert_eq!(bytes, BIND_RX_AUTORELEASE);
        assert_eq!(decode_bind_rx(&BIND_RX_AUTORELEASE[20..]), unnamed(&req));
        assert_eq!(
            req.target(),
            "eth0 (ifindex 4), queues 8..=9, autorelease 1"
        );
        // 0 is sent as a 0 byte, not left out; the rebased numbering (6) only moves the type.
        let off = bind_rx_req(None).autorelease(Some((6, false)));
        let bytes = encode_bind_rx(&off, 0x1122_3344);
        assert_eq!(
            &bytes[76..],
            &[0x05, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00]
        );
        assert_eq!(&bytes[..76], &BIND_RX_AUTORELEASE[..76]);
    }

    #[test]
    fn bind_rx_without_rx_page_size_bytes() {
        let req = bind_rx_req(None);
        assert_eq!(encode_bind_rx(&req, 0x1122_3344), BIND_RX);
        assert_eq!(decode_bind_rx(&BIND_RX[20..]), unnamed(&req));
    }

    #[test]
    fn empty_queue_nests_are_bare_nest_headers() {
        let req = bind_rx_req(None).empty_queue_nests(2);
        let bytes = encode_bind_rx(&req, 1);
        #[rustfmt::skip]
        let attrs: &[u8] = &[
            0x08, 0x00, 0x01, 0x00, 0x04, 0x00, 0x00, 0x00, // NETDEV_A_DMABUF_IFINDEX 4
            0x08, 0x00, 0x03, 0x00, 0x07, 0x00, 0x00, 0x00, // NETDEV_A_DMABUF_FD 7
            0x04, 0x00, 0x02, 0x80, // nla_len 4, NETDEV_A_DMABUF_QUEUES | NLA_F_NESTED (empty)
            0x04, 0x00, 0x02, 0x80, // nla_len 4, NETDEV_A_DMABUF_QUEUES | NLA_F_NESTED (empty)
        ];
        assert_eq!(&bytes[20..], attrs);
        assert_eq!(req.target(), "eth0 (ifindex 4), 2 empty queue nests");
    }

    #[test]
    fn targets_name_device_and_queues() {
        assert_eq!(bind_rx_req(None).target(), "eth0 (ifindex 4), queues 8..=9");
        let mut r = bind_rx_req(None);
        r.queues = vec![QueueNest::rx(3)];
        assert_eq!(r.target(), "eth0 (ifindex 4), queue 3");
        r.queues = vec![QueueNest::rx(1), QueueNest::rx(3)];
        assert_eq!(r.target(), "eth0 (ifindex 4), queues 1,3");
        r.queues = vec![
            QueueNest {
                id: Some(0),
                queue_type: Some(2),
            },
            QueueNest::empty(),
        ];
        assert_eq!(
            r.target(),
            "eth0 (ifindex 4), queue nests {id 0, type 2} {}"
        );
        r.queues.clear();
        assert_eq!(r.target(), "eth0 (ifindex 4), no queues");
    }

    fn netdev_family() -> Family {
        Family::fixture("netdev", 20)
    }

    /// The complete bind-rx message for family id 20 with sequence number `seq`, port id 0.
    fn encode_bind_rx(req: &BindRxRequest, seq: u32) -> Vec<u8> {
        req.genl(&netdev_family(), req.target())
            .encode(seq, 0)
            .unwrap()
    }

    /// Feeds a captured answer to the exchange of `req` (seq `seq`, port id 18858).
    fn answer(req: &BindRxRequest, seq: u32, datagram: &[u8]) -> NlError {
        let genl = req.genl(&netdev_family(), req.target());
        match Exchange::new(&genl, seq, 18858).feed(datagram) {
            Err(Error::Netlink(e)) => *e,
            other => panic!("expected a netlink error, got {other:?}"),
        }
    }

    /// veth0 (ifindex 3) in a fresh netns, a memfd as fd, one queue nest {id 0, type}.
    fn veth_req(queue_type: u32) -> BindRxRequest {
        BindRxRequest {
            ifindex: 3,
            ifname: Some("veth0".into()),
            fd: Some(3),
            queues: vec![QueueNest {
                id: Some(0),
                queue_type: Some(queue_type),
            }],
            rx_page_size: None,
            autorelease: None,
        }
    }

    /// 6.18's answer to bind-rx with queue type 2 (captured with a raw-socket probe; request
    /// ifindex, fd, queues{id 0, type 2}, seq 2; port id 18858).
    #[rustfmt::skip]
    const ERANGE_QUEUE_TYPE: &[u8] = &[
        0x6c, 0x00, 0x00, 0x00, // nlmsg_len 108
        0x02, 0x00,             // NLMSG_ERROR
        0x00, 0x03,             // NLM_F_CAPPED | NLM_F_ACK_TLVS
        0x02, 0x00, 0x00, 0x00, // seq 2
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0xde, 0xff, 0xff, 0xff, // error -34 (ERANGE)
        0x38, 0x00, 0x00, 0x00, //   echoed nlmsg_len 56
        0x14, 0x00, 0x05, 0x00, //   echoed type 20, flags REQUEST|ACK
        0x02, 0x00, 0x00, 0x00, //   echoed seq 2
        0x00, 0x00, 0x00, 0x00, //   echoed pid 0
        0x19, 0x00, 0x01, 0x00, // nla_len 25, NLMSGERR_ATTR_MSG
        b'i', b'n', b't', b'e', b'g', b'e', b'r', b' ', b'o', b'u', b't', b' ',
        b'o', b'f', b' ', b'r', b'a', b'n', b'g', b'e', 0x00, // "integer out of range\0"
        0x00, 0x00, 0x00,       // padding
        0x08, 0x00, 0x02, 0x00, // NLMSGERR_ATTR_OFFS
        0x30, 0x00, 0x00, 0x00, // 48: queues[0].type
        0x24, 0x00, 0x04, 0x80, // nla_len 36, NLMSGERR_ATTR_POLICY | NLA_F_NESTED (not shown)
        0x0c, 0x00, 0x04, 0x00, //   NL_POLICY_TYPE_ATTR_MIN_VALUE_U
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 0
        0x0c, 0x00, 0x05, 0x00, //   NL_POLICY_TYPE_ATTR_MAX_VALUE_U
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 1
        0x08, 0x00, 0x01, 0x00, //   NL_POLICY_TYPE_ATTR_TYPE
        0x04, 0x00, 0x00, 0x00, //   NL_ATTR_TYPE_U32
    ];

    #[test]
    fn extack_erange_maps_to_queue_type_path() {
        let req = veth_req(2);
        assert_eq!(encode_bind_rx(&req, 2).len(), 56, "matches the echo");
        let e = answer(&req, 2, ERANGE_QUEUE_TYPE);
        assert_eq!(e.errno, libc::ERANGE);
        assert_eq!(e.ext_msg.as_deref(), Some("integer out of range"));
        assert_eq!(
            e.bad_attr.as_deref(),
            Some("NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE")
        );
        assert_eq!(e.missing_attr, None);
        assert!(
            e.to_string().ends_with(
                ": ERANGE (Numerical result out of range); kernel: \"integer out of range\"; \
                 at NETDEV_A_DMABUF_QUEUES[0].NETDEV_A_QUEUE_TYPE"
            ),
            "{e}"
        );
    }

    /// 6.18's answer to bind-rx without fd (captured; request ifindex, queues{0, rx}; seq 3).
    #[rustfmt::skip]
    const EINVAL_MISSING_FD: &[u8] = &[
        0x2c, 0x00, 0x00, 0x00, // nlmsg_len 44
        0x02, 0x00,             // NLMSG_ERROR
        0x00, 0x03,             // NLM_F_CAPPED | NLM_F_ACK_TLVS
        0x03, 0x00, 0x00, 0x00, // seq 3
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0xea, 0xff, 0xff, 0xff, // error -22 (EINVAL)
        0x30, 0x00, 0x00, 0x00, //   echoed nlmsg_len 48
        0x14, 0x00, 0x05, 0x00, //   echoed type 20, flags REQUEST|ACK
        0x03, 0x00, 0x00, 0x00, //   echoed seq 3
        0x00, 0x00, 0x00, 0x00, //   echoed pid 0
        0x08, 0x00, 0x05, 0x00, // NLMSGERR_ATTR_MISS_TYPE
        0x03, 0x00, 0x00, 0x00, // 3 (NETDEV_A_DMABUF_FD)
    ];

    #[test]
    fn extack_missing_fd() {
        let mut req = veth_req(0);
        req.fd = None;
        assert_eq!(encode_bind_rx(&req, 3).len(), 48, "matches the echo");
        let e = answer(&req, 3, EINVAL_MISSING_FD);
        assert_eq!(
            (e.errno, e.missing_attr, e.ext_msg.as_deref()),
            (libc::EINVAL, Some(3), None)
        );
        assert_eq!(
            e.to_string(),
            "netdev bind-rx on veth0 (ifindex 3), queue 0: EINVAL (Invalid argument); \
             missing attribute 3"
        );
    }

    /// 6.18's answer to a well-formed bind-rx on veth (captured; seq 4): EOPNOTSUPP at offset
    /// 20, the ifindex, with no message.
    #[rustfmt::skip]
    const EOPNOTSUPP_VETH: &[u8] = &[
        0x2c, 0x00, 0x00, 0x00, // nlmsg_len 44
        0x02, 0x00,             // NLMSG_ERROR
        0x00, 0x03,             // NLM_F_CAPPED | NLM_F_ACK_TLVS
        0x04, 0x00, 0x00, 0x00, // seq 4
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0xa1, 0xff, 0xff, 0xff, // error -95 (EOPNOTSUPP)
        0x38, 0x00, 0x00, 0x00, //   echoed nlmsg_len 56
        0x14, 0x00, 0x05, 0x00, //   echoed type 20, flags REQUEST|ACK
        0x04, 0x00, 0x00, 0x00, //   echoed seq 4
        0x00, 0x00, 0x00, 0x00, //   echoed pid 0
        0x08, 0x00, 0x02, 0x00, // NLMSGERR_ATTR_OFFS
        0x14, 0x00, 0x00, 0x00, // 20: NETDEV_A_DMABUF_IFINDEX
    ];

    #[test]
    fn extack_eopnotsupp_points_at_ifindex() {
        let e = answer(&veth_req(0), 4, EOPNOTSUPP_VETH);
        assert_eq!(
            e.to_string(),
            "netdev bind-rx on veth0 (ifindex 3), queue 0: EOPNOTSUPP (Operation not supported); \
             at NETDEV_A_DMABUF_IFINDEX"
        );
    }

    /// Extack pointing at the second queue nest's id (OFFS 60) with a MISS_NEST offset
    /// (synthetic: 6.18 never got this far on the devices here).
    #[test]
    fn extack_second_queue_and_missing_nest() {
        let req = bind_rx_req(None);
        let genl = req.genl(&netdev_family(), req.target());
        let mut m = Vec::new();
        m.extend_from_slice(&(16u32 + 4 + 16 + 24).to_ne_bytes()); // nlmsg_len 60
        m.extend_from_slice(&2u16.to_ne_bytes()); // NLMSG_ERROR
        m.extend_from_slice(&(NLM_F_CAPPED | NLM_F_ACK_TLVS).to_ne_bytes());
        m.extend_from_slice(&5u32.to_ne_bytes()); // seq 5
        m.extend_from_slice(&42u32.to_ne_bytes()); // pid 42
        m.extend_from_slice(&(-libc::EINVAL).to_ne_bytes()); // error
        m.extend_from_slice(&genl.encode(5, 0).unwrap()[..16]); // echoed header
        #[rustfmt::skip]
        m.extend_from_slice(&[
            0x08, 0x00, 0x02, 0x00, // NLMSGERR_ATTR_OFFS
            0x3c, 0x00, 0x00, 0x00, // 60 → QUEUES[1].QUEUE_ID
            0x08, 0x00, 0x05, 0x00, // NLMSGERR_ATTR_MISS_TYPE
            0x03, 0x00, 0x00, 0x00, // 3 (NETDEV_A_QUEUE_TYPE)
            0x08, 0x00, 0x06, 0x00, // NLMSGERR_ATTR_MISS_NEST
            0x38, 0x00, 0x00, 0x00, // 56 → QUEUES[1]
        ]);
        let Err(Error::Netlink(e)) = Exchange::new(&genl, 5, 42).feed(&m) else {
            panic!("expected a netlink error")
        };
        assert_eq!(
            e.bad_attr.as_deref(),
            Some("NETDEV_A_DMABUF_QUEUES[1].NETDEV_A_QUEUE_ID")
        );
        assert_eq!(e.missing_nest.as_deref(), Some("NETDEV_A_DMABUF_QUEUES[1]"));
        assert!(
            e.to_string()
                .ends_with("missing attribute 3 in NETDEV_A_DMABUF_QUEUES[1]"),
            "{e}"
        );
    }

    #[test]
    fn bind_reply_id() {
        let reply = GenlReply {
            cmd: 13,
            version: 1,
            attrs: vec![8, 0, 4, 0, 3, 0, 0, 0],
        };
        assert_eq!(binding_id(&[reply], "bind-rx").unwrap(), 3);
        let empty = GenlReply {
            cmd: 13,
            version: 1,
            attrs: vec![],
        };
        assert!(binding_id(&[empty], "bind-rx").is_err());
        assert!(binding_id(&[], "bind-rx").is_err());
    }

    /// The binding owns its socket: dropping it closes the fd (checked through
    /// /proc/self/fd, comparing the socket inode so a reused fd number cannot fool the test).
    #[test]
    fn dropping_a_binding_closes_its_socket() {
        let sock = NlSocket::open().expect("netlink socket");
        let fd = sock.as_fd().as_raw_fd();
        let link = format!("/proc/self/fd/{fd}");
        let before = std::fs::read_link(&link).expect("fd is open");
        assert!(
            before.to_string_lossy().starts_with("socket:["),
            "{before:?}"
        );
        let b = DmabufBinding {
            id: 3,
            direction: BindingDirection::Rx,
            ifindex: 4,
            target: "x".into(),
            sock,
        };
        assert_eq!(b.as_fd().as_raw_fd(), fd);
        assert_eq!(
            (b.id(), b.direction(), b.ifindex()),
            (3, BindingDirection::Rx, 4)
        );
        drop(b);
        assert_ne!(std::fs::read_link(&link).ok(), Some(before));

        let sock = NlSocket::open().expect("netlink socket");
        let fd = sock.as_fd().as_raw_fd();
        let link = format!("/proc/self/fd/{fd}");
        let before = std::fs::read_link(&link).expect("fd is open");
        let b = DmabufBinding {
            id: 1,
            direction: BindingDirection::Tx,
            ifindex: 4,
            target: "x".into(),
            sock,
        };
        b.unbind();
        assert_ne!(std::fs::read_link(&link).ok(), Some(before));
    }
}
