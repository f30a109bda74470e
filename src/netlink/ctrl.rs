//! The generic-netlink controller (`nlctrl`, include/uapi/linux/genetlink.h): resolves a
//! family name such as `"netdev"` to its dynamic id, header version and multicast groups with
//! `CTRL_CMD_GETFAMILY`.

use std::collections::BTreeMap;

use super::attr::{kernel_names, put_attr, Attr, AttrIter};
use super::socket::{GenlReply, GenlRequest, NlSocket};
use crate::error::{Error, Result};

/// `GENL_ID_CTRL`: the controller's fixed family id.
pub const GENL_ID_CTRL: u16 = libc::GENL_ID_CTRL as u16;
/// Header version sent in controller requests.
const CTRL_VERSION: u8 = 1;

kernel_names! {
    /// `enum` of `CTRL_CMD_*`.
    fn ctrl_cmd_name -> u8 {
        CTRL_CMD_UNSPEC = 0,
        CTRL_CMD_NEWFAMILY = 1,
        CTRL_CMD_DELFAMILY = 2,
        CTRL_CMD_GETFAMILY = 3,
        CTRL_CMD_NEWOPS = 4,
        CTRL_CMD_DELOPS = 5,
        CTRL_CMD_GETOPS = 6,
        CTRL_CMD_NEWMCAST_GRP = 7,
        CTRL_CMD_DELMCAST_GRP = 8,
        CTRL_CMD_GETMCAST_GRP = 9,
        CTRL_CMD_GETPOLICY = 10,
    }
}

kernel_names! {
    /// `CTRL_ATTR_*`.
    fn ctrl_attr_name -> u16 {
        CTRL_ATTR_UNSPEC = 0,
        CTRL_ATTR_FAMILY_ID = 1,
        CTRL_ATTR_FAMILY_NAME = 2,
        CTRL_ATTR_VERSION = 3,
        CTRL_ATTR_HDRSIZE = 4,
        CTRL_ATTR_MAXATTR = 5,
        CTRL_ATTR_OPS = 6,
        CTRL_ATTR_MCAST_GROUPS = 7,
        CTRL_ATTR_POLICY = 8,
        CTRL_ATTR_OP_POLICY = 9,
        CTRL_ATTR_OP = 10,
    }
}

kernel_names! {
    /// `CTRL_ATTR_MCAST_GRP_*`.
    fn mcast_grp_attr_name -> u16 {
        CTRL_ATTR_MCAST_GRP_UNSPEC = 0,
        CTRL_ATTR_MCAST_GRP_NAME = 1,
        CTRL_ATTR_MCAST_GRP_ID = 2,
    }
}

kernel_names! {
    /// `CTRL_ATTR_POLICY_*`: the per-op entries inside `CTRL_ATTR_OP_POLICY`.
    fn op_policy_attr_name -> u16 {
        CTRL_ATTR_POLICY_UNSPEC = 0,
        CTRL_ATTR_POLICY_DO = 1,
        CTRL_ATTR_POLICY_DUMP = 2,
    }
}

/// `NL_POLICY_TYPE_ATTR_TYPE` (include/uapi/linux/netlink.h): the attribute's
/// `enum netlink_attribute_type` inside a policy dump entry.
const NL_POLICY_TYPE_ATTR_TYPE: u16 = 1;
/// `NL_ATTR_TYPE_U8` (`enum netlink_attribute_type`).
pub const NL_ATTR_TYPE_U8: u32 = 2;
/// `NL_ATTR_TYPE_U32` (`enum netlink_attribute_type`).
pub const NL_ATTR_TYPE_U32: u32 = 4;

/// A multicast group of a family (`CTRL_ATTR_MCAST_GROUPS` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McastGroup {
    /// `CTRL_ATTR_MCAST_GRP_NAME`, e.g. `"mgmt"`.
    pub name: String,
    /// `CTRL_ATTR_MCAST_GRP_ID`: the group number to join.
    pub id: u32,
}

/// A resolved generic-netlink family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// `CTRL_ATTR_FAMILY_NAME`.
    pub name: String,
    /// `CTRL_ATTR_FAMILY_ID`: goes into `nlmsghdr.nlmsg_type` of requests.
    pub id: u16,
    /// `CTRL_ATTR_VERSION`: goes into `genlmsghdr.version` of requests (1 for netdev and
    /// ethtool).
    pub version: u8,
    /// `CTRL_ATTR_MCAST_GROUPS`.
    pub mcast_groups: Vec<McastGroup>,
}

impl Family {
    /// A `do` request for command `cmd` (spec operation name `op`, used in errors).
    pub fn request(&self, cmd: u8, op: &str) -> GenlRequest {
        GenlRequest::new(&self.name, self.id, self.version, cmd, op)
    }

    /// A family `name` with id `id`, header version 1 and no groups, for fixtures.
    #[cfg(test)]
    pub(crate) fn fixture(name: &str, id: u16) -> Family {
        Family {
            name: name.into(),
            id,
            version: 1,
            mcast_groups: Vec::new(),
        }
    }

    /// The id of multicast group `name`, if the family has one.
    pub fn mcast_group(&self, name: &str) -> Option<u32> {
        self.mcast_groups
            .iter()
            .find(|g| g.name == name)
            .map(|g| g.id)
    }
}

/// The groups in a `CTRL_ATTR_MCAST_GROUPS` nest: numbered nests of
/// `CTRL_ATTR_MCAST_GRP_NAME` (string) and `CTRL_ATTR_MCAST_GRP_ID` (u32); entries lacking
/// either are skipped.
fn parse_mcast_groups(a: &Attr<'_>) -> Result<Vec<McastGroup>> {
    let mut groups = Vec::new();
    for entry in a.nested() {
        let (mut name, mut id) = (None, None);
        for ga in entry?.nested() {
            let ga = ga?;
            let gw = mcast_grp_attr_name(ga.kind());
            match ga.kind() {
                CTRL_ATTR_MCAST_GRP_NAME => name = Some(ga.string(gw)?),
                CTRL_ATTR_MCAST_GRP_ID => id = Some(ga.u32(gw)?),
                _ => {}
            }
        }
        if let (Some(name), Some(id)) = (name, id) {
            groups.push(McastGroup { name, id });
        }
    }
    Ok(groups)
}

/// The `CTRL_CMD_GETFAMILY` request for family `name` (one `CTRL_ATTR_FAMILY_NAME`).
pub(crate) fn getfamily_request(name: &str) -> GenlRequest {
    let mut req = GenlRequest::new(
        "nlctrl",
        GENL_ID_CTRL,
        CTRL_VERSION,
        CTRL_CMD_GETFAMILY,
        "getfamily",
    )
    .target(format!("family \"{name}\""));
    put_attr!(req.attrs(), put_str, CTRL_ATTR_FAMILY_NAME, name);
    req
}

/// Builds a [`Family`] from the attributes of a `CTRL_CMD_NEWFAMILY` reply.
///
/// Errors: `Error::Decode` when the id, name or version is missing or malformed.
pub(crate) fn parse_family(attrs: &[u8]) -> Result<Family> {
    let (mut id, mut name, mut version, mut mcast_groups) = (None, None, None, Vec::new());
    for a in AttrIter::new(attrs) {
        let a = a?;
        let what = ctrl_attr_name(a.kind());
        match a.kind() {
            CTRL_ATTR_FAMILY_ID => id = Some(a.u16(what)?),
            CTRL_ATTR_FAMILY_NAME => name = Some(a.string(what)?),
            CTRL_ATTR_VERSION => version = Some(a.u32(what)?),
            CTRL_ATTR_HDRSIZE | CTRL_ATTR_MAXATTR => {
                a.u32(what)?;
            }
            CTRL_ATTR_MCAST_GROUPS => mcast_groups = parse_mcast_groups(&a)?,
            _ => {}
        }
    }
    let missing =
        |what: &str| Error::decode("nlctrl getfamily reply", format!("{what} is missing"));
    let version = version.ok_or_else(|| missing("CTRL_ATTR_VERSION"))?;
    Ok(Family {
        id: id.ok_or_else(|| missing("CTRL_ATTR_FAMILY_ID"))?,
        name: name.ok_or_else(|| missing("CTRL_ATTR_FAMILY_NAME"))?,
        version: u8::try_from(version).map_err(|_| {
            Error::decode(
                "CTRL_ATTR_VERSION",
                format!("version {version} does not fit genlmsghdr.version (u8)"),
            )
        })?,
        mcast_groups,
    })
}

/// Resolves family `name` with `CTRL_CMD_GETFAMILY` on `sock`.
///
/// Errors: `Error::Netlink` with errno `ENOENT` when the kernel has no such family (see
/// `caps::skip_if_family_missing`); other socket and decode errors as [`NlSocket::request`].
#[doc(alias = "CTRL_CMD_GETFAMILY")]
pub fn resolve_family(sock: &mut NlSocket, name: &str) -> Result<Family> {
    let req = getfamily_request(name);
    let replies = sock.request(&req)?;
    let reply = replies.first().ok_or_else(|| {
        Error::decode(
            "nlctrl getfamily reply",
            format!("no reply message for family \"{name}\""),
        )
    })?;
    if reply.cmd != CTRL_CMD_NEWFAMILY {
        return Err(Error::decode(
            "nlctrl getfamily reply",
            format!(
                "command {} ({}), expected CTRL_CMD_NEWFAMILY",
                reply.cmd,
                ctrl_cmd_name(reply.cmd)
            ),
        ));
    }
    parse_family(&reply.attrs)
}

/// The `CTRL_CMD_GETPOLICY` dump request for operation `op` of family `family`
/// (`CTRL_ATTR_FAMILY_NAME` + `CTRL_ATTR_OP`, `NLM_F_DUMP`). Available since 5.10 (per-op
/// filter).
///
/// ```text
/// CTRL_ATTR_FAMILY_NAME  string   e.g. "netdev"
/// CTRL_ATTR_OP           u32      e.g. 13 (bind-rx)
/// ```
pub(crate) fn getpolicy_request(family: &str, op: u32) -> GenlRequest {
    let mut req = GenlRequest::new(
        "nlctrl",
        GENL_ID_CTRL,
        CTRL_VERSION,
        CTRL_CMD_GETPOLICY,
        "getpolicy",
    )
    .dump()
    .target(format!("family \"{family}\", op {op}"));
    put_attr!(req.attrs(), put_str, CTRL_ATTR_FAMILY_NAME, family);
    put_attr!(req.attrs(), put_u32, CTRL_ATTR_OP, op);
    req
}

/// One top-level attribute of an op's `do` policy, from a `CTRL_CMD_GETPOLICY` dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyAttr {
    /// The attribute number.
    pub kind: u16,
    /// Its `NL_POLICY_TYPE_ATTR_TYPE` (`enum netlink_attribute_type`: [`NL_ATTR_TYPE_U8`],
    /// [`NL_ATTR_TYPE_U32`], ...), `None` when the dump left it out.
    pub nl_type: Option<u32>,
}

/// The top-level attribute numbers of `op`'s `do` policy, from the messages of a
/// `CTRL_CMD_GETPOLICY` dump, ascending. See [`parse_op_policy`].
///
/// Errors: as [`parse_op_policy`].
#[cfg(test)]
pub(crate) fn parse_op_policy_attrs(replies: &[GenlReply], op: u32) -> Result<Vec<u16>> {
    Ok(parse_op_policy(replies, op)?
        .iter()
        .map(|a| a.kind)
        .collect())
}

/// The top-level attributes of `op`'s `do` policy with their types, from the messages of a
/// `CTRL_CMD_GETPOLICY` dump, ascending by number. The dump's shape
/// (include/uapi/linux/genetlink.h, netlink.h):
///
/// ```text
/// CTRL_ATTR_OP_POLICY                nest
///   └─ <op>                          nest (type = op id)
///        ├─ CTRL_ATTR_POLICY_DO      u32  policy index
///        └─ CTRL_ATTR_POLICY_DUMP    u32  policy index
/// CTRL_ATTR_POLICY                   nest
///   └─ <policy index>                nest
///        └─ <attribute number>       nest of NL_POLICY_TYPE_ATTR_* (type, ranges, ...)
///             └─ NL_POLICY_TYPE_ATTR_TYPE  u32  enum netlink_attribute_type
/// ```
///
/// Errors: `Error::Decode` for malformed attributes or when no `do` policy for `op` was
/// reported.
pub fn parse_op_policy(replies: &[GenlReply], op: u32) -> Result<Vec<PolicyAttr>> {
    let mut do_policy = None;
    let mut policies: BTreeMap<u16, BTreeMap<u16, Option<u32>>> = BTreeMap::new();
    for r in replies {
        for a in r.attr_iter() {
            let a = a?;
            match a.kind() {
                CTRL_ATTR_OP_POLICY => {
                    for op_nest in a.nested() {
                        let op_nest = op_nest?;
                        if u32::from(op_nest.kind()) != op {
                            continue;
                        }
                        for p in op_nest.nested() {
                            let p = p?;
                            if p.kind() == CTRL_ATTR_POLICY_DO {
                                do_policy = Some(p.u32(op_policy_attr_name(p.kind()))?);
                            }
                        }
                    }
                }
                CTRL_ATTR_POLICY => {
                    for pol in a.nested() {
                        let pol = pol?;
                        let attrs = policies.entry(pol.kind()).or_default();
                        for attr in pol.nested() {
                            let attr = attr?;
                            let mut nl_type = None;
                            for t in attr.nested() {
                                let t = t?;
                                if t.kind() == NL_POLICY_TYPE_ATTR_TYPE {
                                    nl_type = Some(t.u32("NL_POLICY_TYPE_ATTR_TYPE")?);
                                }
                            }
                            let slot = attrs.entry(attr.kind()).or_default();
                            *slot = slot.or(nl_type);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let idx = do_policy.ok_or_else(|| {
        Error::decode(
            "nlctrl getpolicy reply",
            format!("no CTRL_ATTR_POLICY_DO for op {op}"),
        )
    })?;
    Ok(u16::try_from(idx)
        .ok()
        .and_then(|i| policies.get(&i))
        .map(|attrs| {
            attrs
                .iter()
                .map(|(&kind, &nl_type)| PolicyAttr { kind, nl_type })
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
/// The two replies of a bind-rx `CTRL_CMD_GETPOLICY` dump (op 13, family id 20: its `do`
/// policy with attrs 1, 2, 3; the nested queue policy with attrs 1, 3, 7), with attributes `extra`
/// (number, `NL_ATTR_TYPE_*`) after 1, 2, 3.
pub(crate) fn policy_replies_with(extra: &[(u16, u32)]) -> Vec<GenlReply> {
    let mut first = crate::netlink::attr::AttrWriter::new();
    first.put_u16(CTRL_ATTR_FAMILY_ID, "CTRL_ATTR_FAMILY_ID", 20);
    let outer = first.begin_nest(CTRL_ATTR_OP_POLICY, "CTRL_ATTR_OP_POLICY");
    let op = first.begin_nest(13, "op 13");
    first.put_u32(CTRL_ATTR_POLICY_DO, "CTRL_ATTR_POLICY_DO", 0);
    first.end_nest(op);
    first.end_nest(outer);
    let mut second = crate::netlink::attr::AttrWriter::new();
    second.put_u16(CTRL_ATTR_FAMILY_ID, "CTRL_ATTR_FAMILY_ID", 20);
    let outer = second.begin_nest(CTRL_ATTR_POLICY, "CTRL_ATTR_POLICY");
    let pol = second.begin_nest(0, "policy 0");
    let mut attrs = vec![(1u16, NL_ATTR_TYPE_U32), (2, 13), (3, NL_ATTR_TYPE_U32)];
    attrs.extend_from_slice(extra);
    for (a, t) in attrs {
        let n = second.begin_nest(a, "attr");
        second.put_u32(1, "NL_POLICY_TYPE_ATTR_TYPE", t);
        second.end_nest(n);
    }
    second.end_nest(pol);
    // The nested queue-id policy (index 1): must not leak into the answer.
    let pol = second.begin_nest(1, "policy 1");
    for a in [1u16, 3, 7] {
        let n = second.begin_nest(a, "attr");
        second.put_u32(1, "NL_POLICY_TYPE_ATTR_TYPE", 4);
        second.end_nest(n);
    }
    second.end_nest(pol);
    second.end_nest(outer);
    [first, second]
        .iter()
        .map(|w| GenlReply {
            cmd: CTRL_CMD_GETPOLICY,
            version: 1,
            attrs: w.bytes().to_vec(),
        })
        .collect()
}

/// Whether `err` is the controller's "no such family" answer: `ENOENT` from nlctrl that does
/// not point at another attribute than the family's name or id. An `ENOENT` pointing at
/// `CTRL_ATTR_OP` (getpolicy for an op the family does not have) is not a missing family.
pub fn is_family_missing(err: &Error) -> bool {
    matches!(err, Error::Netlink(e)
    if e.family == "nlctrl"
        && e.errno == libc::ENOENT
        && e.bad_attr.as_deref().is_none_or(|a| {
            a == "CTRL_ATTR_FAMILY_NAME" || a == "CTRL_ATTR_FAMILY_ID"
        }))
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::netlink::attr::AttrWriter;
    use crate::netlink::socket::Exchange;
    use proptest::prelude::*;

    /// The `CTRL_CMD_GETFAMILY` request for "netdev", seq 1, pid 0: the bytes the capture
    /// probe sent to 6.18 (answered by [`NEWFAMILY_NETDEV`] and [`ACK_GETFAMILY`]).
    #[rustfmt::skip]
    const GETFAMILY_NETDEV: &[u8] = &[
        0x20, 0x00, 0x00, 0x00, // nlmsg_len 32
        0x10, 0x00,             // nlmsg_type 16 (GENL_ID_CTRL)
        0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
        0x01, 0x00, 0x00, 0x00, // seq 1
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x03,                   // cmd CTRL_CMD_GETFAMILY
        0x01,                   // version 1
        0x00, 0x00,             // reserved
        0x0b, 0x00,             // nla_len 11
        0x02, 0x00,             // CTRL_ATTR_FAMILY_NAME
        b'n', b'e', b't', b'd', b'e', b'v', 0x00, // "netdev\0"
        0x00,                   // padding
    ];

    #[test]
    fn getfamily_request_bytes() {
        let req = getfamily_request("netdev");
        assert_eq!(req.encode(1, 0).unwrap(), GETFAMILY_NETDEV);
        let attrs: Vec<_> = AttrIter::new(&GETFAMILY_NETDEV[20..])
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(attrs.len(), 1);
        assert_eq!(
            (attrs[0].kind(), attrs[0].string("name").unwrap()),
            (CTRL_ATTR_FAMILY_NAME, "netdev".to_string())
        );
    }

    /// The answer to [`GETFAMILY_NETDEV`] on 6.18 (captured with a raw-socket probe in a
    /// fresh netns; we sent seq 1, the socket's port id was 18858): the `CTRL_CMD_NEWFAMILY`
    /// reply in one datagram, the ACK in the next. nlctrl sets no `NLA_F_NESTED` on its nests.
    #[rustfmt::skip]
    const NEWFAMILY_NETDEV: &[u8] = &[
        0x1c, 0x01, 0x00, 0x00, // nlmsg_len 284
        0x10, 0x00,             // nlmsg_type 16 (GENL_ID_CTRL)
        0x00, 0x00,             // flags 0
        0x01, 0x00, 0x00, 0x00, // seq 1
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0x01, 0x02, 0x00, 0x00, // cmd 1 CTRL_CMD_NEWFAMILY, version 2, reserved
        0x0b, 0x00, 0x02, 0x00, // nla_len 11, CTRL_ATTR_FAMILY_NAME
        b'n', b'e', b't', b'd', b'e', b'v', 0x00, 0x00, // "netdev\0" + padding
        0x06, 0x00, 0x01, 0x00, // nla_len 6, CTRL_ATTR_FAMILY_ID
        0x14, 0x00, 0x00, 0x00, // id 20 + 2 bytes padding
        0x08, 0x00, 0x03, 0x00, // CTRL_ATTR_VERSION
        0x01, 0x00, 0x00, 0x00, // 1
        0x08, 0x00, 0x04, 0x00, // CTRL_ATTR_HDRSIZE
        0x00, 0x00, 0x00, 0x00, // 0
        0x08, 0x00, 0x05, 0x00, // CTRL_ATTR_MAXATTR
        0x00, 0x00, 0x00, 0x00, // 0
        0xa4, 0x00, 0x06, 0x00, // nla_len 164, CTRL_ATTR_OPS (8 entries of 20 bytes)
        0x14, 0x00, 0x01, 0x00, 0x08, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, // #1 op 1 dev-get
        0x08, 0x00, 0x02, 0x00, 0x0e, 0x00, 0x00, 0x00, //    flags DO|DUMP|HASPOL
        0x14, 0x00, 0x02, 0x00, 0x08, 0x00, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, // #2 op 5 page-pool-get
        0x08, 0x00, 0x02, 0x00, 0x0e, 0x00, 0x00, 0x00, //    flags DO|DUMP|HASPOL
        0x14, 0x00, 0x03, 0x00, 0x08, 0x00, 0x01, 0x00, 0x0a, 0x00, 0x00, 0x00, // #3 op 10 queue-get
        0x08, 0x00, 0x02, 0x00, 0x0e, 0x00, 0x00, 0x00, //    flags DO|DUMP|HASPOL
        0x14, 0x00, 0x04, 0x00, 0x08, 0x00, 0x01, 0x00, 0x0b, 0x00, 0x00, 0x00, // #4 op 11 napi-get
        0x08, 0x00, 0x02, 0x00, 0x0e, 0x00, 0x00, 0x00, //    flags DO|DUMP|HASPOL
        0x14, 0x00, 0x05, 0x00, 0x08, 0x00, 0x01, 0x00, 0x0c, 0x00, 0x00, 0x00, // #5 op 12 qstats-get
        0x08, 0x00, 0x02, 0x00, 0x0c, 0x00, 0x00, 0x00, //    flags DUMP|HASPOL
        0x14, 0x00, 0x06, 0x00, 0x08, 0x00, 0x01, 0x00, 0x0d, 0x00, 0x00, 0x00, // #6 op 13 bind-rx
        0x08, 0x00, 0x02, 0x00, 0x0b, 0x00, 0x00, 0x00, //    flags ADMIN_PERM|DO|HASPOL
        0x14, 0x00, 0x07, 0x00, 0x08, 0x00, 0x01, 0x00, 0x0e, 0x00, 0x00, 0x00, // #7 op 14 napi-set
        0x08, 0x00, 0x02, 0x00, 0x0b, 0x00, 0x00, 0x00, //    flags ADMIN_PERM|DO|HASPOL
        0x14, 0x00, 0x08, 0x00, 0x08, 0x00, 0x01, 0x00, 0x0f, 0x00, 0x00, 0x00, // #8 op 15 bind-tx
        0x08, 0x00, 0x02, 0x00, 0x0a, 0x00, 0x00, 0x00, //    flags DO|HASPOL
        0x38, 0x00, 0x07, 0x00, // nla_len 56, CTRL_ATTR_MCAST_GROUPS
        0x18, 0x00, 0x01, 0x00, //   nla_len 24, entry 1
        0x08, 0x00, 0x02, 0x00, //     CTRL_ATTR_MCAST_GRP_ID
        0x04, 0x00, 0x00, 0x00, //     4
        0x09, 0x00, 0x01, 0x00, //     nla_len 9, CTRL_ATTR_MCAST_GRP_NAME
        b'm', b'g', b'm', b't', 0x00, 0x00, 0x00, 0x00, // "mgmt\0" + padding
        0x1c, 0x00, 0x02, 0x00, //   nla_len 28, entry 2
        0x08, 0x00, 0x02, 0x00, //     CTRL_ATTR_MCAST_GRP_ID
        0x05, 0x00, 0x00, 0x00, //     5
        0x0e, 0x00, 0x01, 0x00, //     nla_len 14, CTRL_ATTR_MCAST_GRP_NAME
        b'p', b'a', b'g', b'e', b'-', b'p', b'o', b'o', b'l', 0x00, // "page-pool\0"
        0x00, 0x00,             //     padding
    ];

    /// The ACK that followed [`NEWFAMILY_NETDEV`] in its own datagram (captured, 6.18).
    #[rustfmt::skip]
    const ACK_GETFAMILY: &[u8] = &[
        0x24, 0x00, 0x00, 0x00, // nlmsg_len 36
        0x02, 0x00,             // NLMSG_ERROR
        0x00, 0x01,             // NLM_F_CAPPED
        0x01, 0x00, 0x00, 0x00, // seq 1
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0x00, 0x00, 0x00, 0x00, // error 0: ACK
        0x20, 0x00, 0x00, 0x00, //   echoed nlmsg_len 32
        0x10, 0x00, 0x05, 0x00, //   echoed type 16, flags REQUEST|ACK
        0x01, 0x00, 0x00, 0x00, //   echoed seq 1
        0x00, 0x00, 0x00, 0x00, //   echoed pid 0
    ];

    /// Answer to getfamily "nosuchfam" (captured, 6.18; seq 10): ENOENT, no extack.
    #[rustfmt::skip]
    const ENOENT_NOSUCHFAM: &[u8] = &[
        0x24, 0x00, 0x00, 0x00, // nlmsg_len 36
        0x02, 0x00,             // NLMSG_ERROR
        0x00, 0x01,             // NLM_F_CAPPED
        0x0a, 0x00, 0x00, 0x00, // seq 10
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0xfe, 0xff, 0xff, 0xff, // error -2 (ENOENT)
        0x24, 0x00, 0x00, 0x00, //   echoed nlmsg_len 36
        0x10, 0x00, 0x05, 0x00, //   echoed type 16, flags REQUEST|ACK
        0x0a, 0x00, 0x00, 0x00, //   echoed seq 10
        0x00, 0x00, 0x00, 0x00, //   echoed pid 0
    ];

    #[test]
    fn captured_getfamily_exchange() {
        let req = getfamily_request("netdev");
        let mut ex = Exchange::new(&req, 1, 18858);
        assert!(!ex.feed(NEWFAMILY_NETDEV).unwrap());
        assert!(ex.feed(ACK_GETFAMILY).unwrap());
        let replies = ex.into_replies();
        assert_eq!(
            (replies[0].cmd, replies[0].version),
            (CTRL_CMD_NEWFAMILY, 2)
        );
        assert_eq!(parse_family(&replies[0].attrs).unwrap().id, 20);

        let req = getfamily_request("nosuchfam");
        let e = Exchange::new(&req, 10, 18858)
            .feed(ENOENT_NOSUCHFAM)
            .unwrap_err();
        assert!(is_family_missing(&e));
        assert_eq!(
            e.to_string(),
            "nlctrl getfamily on family \"nosuchfam\": ENOENT (No such file or directory)"
        );
    }

    #[test]
    fn newfamily_reply_round_trip() {
        let attrs_bytes = &NEWFAMILY_NETDEV[20..];
        let attrs: Vec<_> = AttrIter::new(attrs_bytes).collect::<Result<_>>().unwrap();
        let groups = vec![
            McastGroup {
                name: "mgmt".into(),
                id: 4,
            },
            McastGroup {
                name: "page-pool".into(),
                id: 5,
            },
        ];
        let kinds: Vec<u16> = attrs.iter().map(Attr::kind).collect();
        #[rustfmt::skip]
        assert_eq!(kinds, [
            CTRL_ATTR_FAMILY_NAME, CTRL_ATTR_FAMILY_ID, CTRL_ATTR_VERSION, CTRL_ATTR_HDRSIZE,
            CTRL_ATTR_MAXATTR, CTRL_ATTR_OPS, CTRL_ATTR_MCAST_GROUPS,
        ]);
        assert_eq!(attrs[5].raw_type(), 6, "nlctrl sets no NLA_F_NESTED");
        assert_eq!(parse_mcast_groups(&attrs[6]).unwrap(), groups);
        let fam = parse_family(attrs_bytes).unwrap();
        assert_eq!(
            fam,
            Family {
                name: "netdev".into(),
                id: 20,
                version: 1,
                mcast_groups: groups
            }
        );
        assert_eq!(fam.mcast_group("page-pool"), Some(5));
        // Written back the way nlctrl writes it (nests without NLA_F_NESTED, the ops copied
        // raw), the attributes are the captured bytes.
        let mut w = AttrWriter::new();
        put_attr!(w, put_str, CTRL_ATTR_FAMILY_NAME, &fam.name);
        put_attr!(w, put_u16, CTRL_ATTR_FAMILY_ID, fam.id);
        put_attr!(w, put_u32, CTRL_ATTR_VERSION, fam.version.into());
        put_attr!(w, put_u32, CTRL_ATTR_HDRSIZE, 0);
        put_attr!(w, put_u32, CTRL_ATTR_MAXATTR, 0);
        w.put(attrs[5].raw_type(), "CTRL_ATTR_OPS", attrs[5].payload());
        let outer = w.begin_nest_unflagged(CTRL_ATTR_MCAST_GROUPS, "GROUPS", false);
        for (i, g) in (1..).zip(&fam.mcast_groups) {
            let entry = w.begin_nest_unflagged(i, "GROUPS_ENTRY", true);
            put_attr!(w, put_u32, CTRL_ATTR_MCAST_GRP_ID, g.id);
            put_attr!(w, put_str, CTRL_ATTR_MCAST_GRP_NAME, &g.name);
            w.end_nest(entry);
        }
        w.end_nest(outer);
        assert_eq!(w.bytes(), attrs_bytes);
    }

    #[test]
    fn missing_family_is_recognised() {
        let req = getfamily_request("nosuchfam");
        let e: Error = req
            .error(&crate::netlink::socket::ErrorMsg {
                errno: libc::ENOENT,
                ..Default::default()
            })
            .into();
        assert!(is_family_missing(&e));
        assert_eq!(
            e.to_string(),
            "nlctrl getfamily on family \"nosuchfam\": ENOENT (No such file or directory)"
        );
    }

    /// The `CTRL_CMD_GETPOLICY` dump request for netdev op 13 (bind-rx), seq 7, pid 0.
    #[rustfmt::skip]
    const GETPOLICY_BIND_RX: &[u8] = &[
        0x28, 0x00, 0x00, 0x00, // nlmsg_len 40
        0x10, 0x00,             // nlmsg_type 16 (GENL_ID_CTRL)
        0x05, 0x03,             // NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP (0x300)
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x0a,                   // cmd CTRL_CMD_GETPOLICY
        0x01,                   // version 1
        0x00, 0x00,             // reserved
        0x0b, 0x00,             // nla_len 11
        0x02, 0x00,             // CTRL_ATTR_FAMILY_NAME
        b'n', b'e', b't', b'd', b'e', b'v', 0x00, // "netdev\0"
        0x00,                   // padding
        0x08, 0x00,             // nla_len 8
        0x0a, 0x00,             // CTRL_ATTR_OP
        0x0d, 0x00, 0x00, 0x00, // 13 (bind-rx)
    ];

    #[test]
    fn getpolicy_request_bytes() {
        assert_eq!(
            getpolicy_request("netdev", 13).encode(7, 0).unwrap(),
            GETPOLICY_BIND_RX
        );
    }

    /// Two dump messages (genl payloads) as 6.18 shapes its GETPOLICY answer for bind-rx
    /// (synthetic, following `docs/kernel-interface.md#genl-controller`: op 13 → do policy;
    /// policy with attrs 1, 2, 3; the nested queue policy with attrs 1 and 3). `new_policy`
    /// adds attribute 5.
    fn policy_replies(new_policy: bool) -> Vec<GenlReply> {
        let extra: &[(u16, u32)] = if new_policy {
            &[(5, NL_ATTR_TYPE_U32)]
        } else {
            &[]
        };
        policy_replies_with(extra)
    }

    #[test]
    fn op_policy_attrs_are_the_do_policy_only() {
        assert_eq!(
            parse_op_policy_attrs(&policy_replies(false), 13).unwrap(),
            vec![1, 2, 3]
        );
        assert_eq!(
            parse_op_policy_attrs(&policy_replies(true), 13).unwrap(),
            vec![1, 2, 3, 5]
        );
        assert!(parse_op_policy_attrs(&policy_replies(false), 15).is_err());
    }

    /// Only nlctrl's ENOENT about the family itself means "no such family"; the same errno
    /// about the op (an unknown command) is an error, never a skip.
    #[test]
    fn only_a_missing_family_is_family_missing() {
        let nl = |family: &str, errno, bad: Option<&str>| {
            Error::Netlink(Box::new(crate::error::NlError {
                family: family.into(),
                op: "getpolicy".into(),
                target: String::new(),
                errno,
                ext_msg: None,
                bad_attr: bad.map(str::to_string),
                missing_attr: None,
                missing_nest: None,
                ack_problem: None,
            }))
        };
        assert!(is_family_missing(&nl("nlctrl", libc::ENOENT, None)));
        assert!(is_family_missing(&nl(
            "nlctrl",
            libc::ENOENT,
            Some("CTRL_ATTR_FAMILY_NAME")
        )));
        assert!(!is_family_missing(&nl(
            "nlctrl",
            libc::ENOENT,
            Some("CTRL_ATTR_OP")
        )));
        assert!(!is_family_missing(&nl("nlctrl", libc::EINVAL, None)));
        assert!(!is_family_missing(&nl("netdev", libc::ENOENT, None)));
    }

    proptest! {
        #[test]
        fn family_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_family(&bytes);
        }
    }
}
