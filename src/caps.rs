//! Which kernel answers mean "this host, kernel or driver cannot": [`classify`] sorts a
//! refusal into a skip (exit 4, kselftest's `KSFT_SKIP`) carrying what is [`Missing`] (the
//! values and their sentences live in `crate::missing`, a leaf, re-exported here), and the
//! few checks that name a missing capability directly.
//!
//! Policy only: the kernel calls are made in `crate::sys` and `crate::netlink`, which return
//! errnos and the kernel's answers; the callers here decide which answers mean "this host,
//! kernel or driver cannot", everything else staying a failure.

use crate::error::Error;
pub(crate) use crate::missing::open_failure;
pub use crate::missing::Missing;

/// A kernel operation whose refusal [`classify`] sorts.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    /// A NIC configuration step on `ifname` (header split, RSS, ntuple, channels), named
    /// `what`; `hint` is appended to its skip.
    Nic {
        /// The interface.
        ifname: &'a str,
        /// The step, e.g. `header split (tcp-data-split)`.
        what: &'a str,
        /// What to do instead.
        hint: Option<&'static str>,
    },
    /// netdev bind-rx with these attributes.
    BindRx {
        /// `-b`.
        rx_page_size: Option<u32>,
        /// The autorelease attribute was sent.
        autorelease: bool,
    },
    /// netdev bind-tx on `ifname`.
    BindTx {
        /// The interface.
        ifname: &'a str,
    },
    /// Resolving a generic netlink family.
    Family {
        /// The family.
        name: &'static str,
    },
    /// `io_uring_setup` with the flags zcrx needs; `disabled` is `kernel.io_uring_disabled`.
    IoUringSetup {
        /// The sysctl, when readable.
        disabled: Option<u64>,
    },
    /// `IORING_REGISTER_ZCRX_IFQ`.
    ZcrxRegister {
        /// With `ZCRX_REG_NODEV`.
        nodev: bool,
        /// `rx_buf_len`, when set.
        rx_buf_len: Option<u32>,
    },
    /// `setsockopt(SOL_SOCKET, SO_DEVMEM_AUTORELEASE)`.
    DevmemAutorelease {
        /// The option number.
        optname: i32,
    },
    /// `open` of the udmabuf device.
    UdmabufOpen {
        /// The device.
        dev: &'a std::path::Path,
    },
    /// `open` of a dma-buf heap's device.
    DmaHeapOpen {
        /// The heap's name.
        name: &'a str,
        /// The heap's device.
        path: &'a std::path::Path,
        /// The directory of the heaps.
        dir: &'a std::path::Path,
        /// The heaps the directory lists; `None` when it does not exist or cannot be read.
        heaps: Option<&'a [String]>,
        /// Whether the directory exists.
        dir_exists: bool,
    },
    /// `DMA_HEAP_IOCTL_ALLOC` of `size_bytes` from heap `name`.
    DmaHeapAlloc {
        /// The heap's name.
        name: &'a str,
        /// Bytes asked for.
        size_bytes: u64,
    },
    /// `mmap` of a heap's dma-buf.
    DmaHeapMap {
        /// The heap's name.
        name: &'a str,
        /// The dma-buf's size, bytes.
        size_bytes: u64,
    },
    /// netdev bind-rx of a heap's dma-buf with rx-page-size `rx_page_size`.
    DmaHeapBind {
        /// The heap's name.
        name: &'a str,
        /// `-b`.
        rx_page_size: Option<u32>,
    },
}

/// The extack text of the kernel's bind-rx refusal of a scatter-gather entry that is not a
/// whole number of niovs at a niov-aligned address (`net/core/devmem.c`, with rx-page-size;
/// the kernel cuts the whole message at 79 characters).
const SG_NOT_ALIGNED: &str = "not aligned to niov size";

/// Sorts the kernel's refusal `e` of `op`: the answers that mean "this host, kernel or
/// driver cannot" become [`Error::Skip`] with what is missing; every other answer (a
/// failure) is returned unchanged.
///
/// - `EPERM`: the operation needs `CAP_NET_ADMIN` (bind-tx: "not permitted"; io_uring
///   setup: `kernel.io_uring_disabled` or a policy; the udmabuf device: root);
/// - `EOPNOTSUPP`: the driver, device or queue lacks the operation;
/// - `ENOENT` resolving a family: the kernel lacks it;
/// - bind-rx `EBUSY` with the autorelease attribute: the other system-wide mode is in use;
///   bind-rx `EINVAL` "Unknown attribute type" with rx-page-size: a kernel without it;
/// - io_uring setup `ENOSYS` / `EINVAL`: no io_uring / not the flags zcrx needs; zcrx
///   registration `EINVAL`: no device-less mode, or `rx_buf_len` reserved;
/// - `SO_DEVMEM_AUTORELEASE` `ENOPROTOOPT`: the option does not exist;
/// - udmabuf `ENOENT`/`ENODEV`/`ENXIO`: no udmabuf; `EACCES`/`EPERM`: no access;
/// - a dma-buf heap's device: the same errnos (no heaps at all when the directory is
///   missing, else no heap of that name); its allocation `ENOMEM`; any refusal to map its
///   dma-buf; bind-rx of its dma-buf `EINVAL` "… not aligned to niov size …".
pub fn classify(e: Error, op: Op<'_>) -> Error {
    let answer = || e.to_string();
    let missing = match (op, e.errno()) {
        (Op::Nic { ifname, what, hint }, Some(libc::EOPNOTSUPP)) => Missing::Driver {
            ifname: ifname.to_string(),
            what: what.to_string(),
            answer: answer(),
            hint,
        },
        (Op::Nic { ifname, what, .. }, Some(libc::EPERM)) => Missing::NetAdmin {
            what: format!("{ifname}: {what}"),
            answer: answer(),
        },
        (Op::BindRx { .. }, Some(libc::EPERM)) => Missing::NetAdmin {
            what: "bind-rx".into(),
            answer: answer(),
        },
        (Op::BindRx { rx_page_size, .. }, Some(libc::EOPNOTSUPP)) => Missing::DevmemRx {
            rx_page_size,
            answer: answer(),
        },
        // Autorelease series v10: the mode is system-wide while any RX binding exists
        // (devmem.c, "System already configured with autorelease=%d").
        (
            Op::BindRx {
                autorelease: true, ..
            },
            Some(libc::EBUSY),
        ) => Missing::AutoreleaseBusy { answer: answer() },
        (
            Op::BindRx {
                rx_page_size: Some(_),
                ..
            },
            Some(libc::EINVAL),
        ) if matches!(&e, Error::Netlink(nl)
                if nl.ext_msg.as_deref() == Some("Unknown attribute type")) =>
        {
            Missing::RxPageSizeUnknown { answer: answer() }
        }
        (Op::BindTx { ifname }, Some(libc::EOPNOTSUPP)) => Missing::DevmemTx {
            ifname: ifname.to_string(),
            answer: answer(),
        },
        (Op::BindTx { .. }, Some(libc::EPERM)) => Missing::BindTxNotPermitted { answer: answer() },
        (Op::Family { name }, _) if crate::netlink::ctrl::is_family_missing(&e) => {
            Missing::NetlinkFamily { family: name }
        }
        (Op::IoUringSetup { disabled }, Some(libc::EPERM)) => Missing::IoUringNotPermitted {
            disabled,
            answer: answer(),
        },
        (Op::IoUringSetup { .. }, Some(libc::ENOSYS)) => Missing::NoIoUring { answer: answer() },
        (Op::IoUringSetup { .. }, Some(libc::EINVAL)) => Missing::RingFlags { answer: answer() },
        (Op::ZcrxRegister { .. }, Some(libc::EPERM)) => Missing::NetAdmin {
            what: "io_uring zcrx registration".into(),
            answer: answer(),
        },
        (Op::ZcrxRegister { nodev, rx_buf_len }, Some(libc::EOPNOTSUPP)) => Missing::Zcrx {
            rx_buf_len,
            nodev,
            answer: answer(),
        },
        (Op::ZcrxRegister { nodev: true, .. }, Some(libc::EINVAL)) => Missing::ZcrxNoDev {
            flag: crate::sys::uapi::ZCRX_REG_NODEV,
            answer: answer(),
        },
        (
            Op::ZcrxRegister {
                rx_buf_len: Some(len),
                ..
            },
            Some(libc::EINVAL),
        ) => Missing::RxBufLen {
            len,
            answer: answer(),
        },
        (Op::DevmemAutorelease { optname }, Some(libc::ENOPROTOOPT)) => {
            Missing::SoDevmemAutorelease { optname }
        }
        (Op::UdmabufOpen { dev }, Some(errno @ (libc::ENOENT | libc::ENODEV | libc::ENXIO))) => {
            Missing::Udmabuf {
                dev: dev.to_path_buf(),
                errno,
            }
        }
        (Op::UdmabufOpen { dev }, Some(errno @ (libc::EACCES | libc::EPERM))) => {
            Missing::UdmabufAccess {
                dev: dev.to_path_buf(),
                errno,
            }
        }
        (
            Op::DmaHeapOpen {
                path,
                dir,
                dir_exists: false,
                ..
            },
            Some(errno @ (libc::ENOENT | libc::ENODEV | libc::ENXIO)),
        ) => Missing::DmaHeaps {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            errno,
        },
        (
            Op::DmaHeapOpen {
                name, path, heaps, ..
            },
            Some(errno @ (libc::ENOENT | libc::ENODEV | libc::ENXIO)),
        ) => Missing::DmaHeapName {
            name: name.to_string(),
            path: path.to_path_buf(),
            errno,
            heaps: heaps.map(<[String]>::to_vec),
        },
        (Op::DmaHeapOpen { path, .. }, Some(errno @ (libc::EACCES | libc::EPERM))) => {
            Missing::DmaHeapAccess {
                path: path.to_path_buf(),
                errno,
            }
        }
        (Op::DmaHeapAlloc { name, size_bytes }, Some(libc::ENOMEM)) => Missing::DmaHeapMemory {
            name: name.to_string(),
            size_bytes,
            answer: answer(),
        },
        (Op::DmaHeapMap { name, size_bytes }, Some(_)) => Missing::DmaHeapMap {
            name: name.to_string(),
            size_bytes,
            answer: answer(),
        },
        (Op::DmaHeapBind { name, rx_page_size }, Some(libc::EINVAL))
            if matches!(&e, Error::Netlink(nl)
                if nl.ext_msg.as_deref().is_some_and(|m| m.contains(SG_NOT_ALIGNED))) =>
        {
            Missing::DmaHeapUnaligned {
                name: name.to_string(),
                rx_page_size,
                answer: answer(),
            }
        }
        _ => return e,
    };
    Error::Skip(missing)
}

/// `r`, with "the kernel has no generic netlink family `name`" as a skip ([`classify`] with
/// [`Op::Family`]); every other error passes through unchanged.
///
/// Errors: [`Error::Skip`] with [`Missing::NetlinkFamily`]; `r`'s other errors.
pub fn skip_if_family_missing<T>(
    r: crate::error::Result<T>,
    name: &'static str,
) -> crate::error::Result<T> {
    r.map_err(|e| classify(e, Op::Family { name }))
}

/// What `-a WANT` (bind-rx autorelease) sends to a kernel whose bind-rx `do` policy is
/// `policy` (its attribute numbers and types, [`crate::netlink::netdev::policy::bind_rx_policy`]):
/// with the attribute, `Some((its number, want))`; without it, `-a 0` binds without the attribute
/// (`None`: such a kernel's only mode releases tokens still held at close), and `-a 1` cannot run.
/// The one place that decides it, for the devmem server and for a sweep over `autorelease`.
///
/// Errors: [`Missing::AutoreleaseAttr`] (with the policy's attribute numbers) for `-a 1` on a
/// kernel without the attribute.
pub fn bind_autorelease(
    want: bool,
    policy: &[crate::netlink::ctrl::PolicyAttr],
) -> Result<Option<(u16, bool)>, Missing> {
    match crate::netlink::netdev::policy::autorelease_attr(policy) {
        Some(attr) => Ok(Some((attr, want))),
        None if !want => Ok(None),
        None => Err(Missing::AutoreleaseAttr {
            policy: policy.iter().map(|a| a.kind).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nlctrl's ENOENT for an unknown family name is a skip; any other error passes.
    #[test]
    fn missing_family_becomes_skip() {
        let req = crate::netlink::ctrl::getfamily_request("nosuchfam");
        let e: Error = req
            .error(&crate::netlink::socket::ErrorMsg {
                errno: libc::ENOENT,
                ..Default::default()
            })
            .into();
        let s = skip_if_family_missing::<()>(Err(e), "nosuchfam").unwrap_err();
        assert_eq!(s.exit_code(), crate::error::EXIT_SKIP);
        let other = skip_if_family_missing::<()>(Err(Error::Usage("x".into())), "x");
        assert!(matches!(other, Err(Error::Usage(_))));
    }
    use crate::error::NlError;

    /// Scripted bind-rx policies: this kernel's (6.18, 7.3: no autorelease), the unmerged
    /// series' as posted (5 = autorelease, u8) and rebased after rx-page-size (6, u8).
    #[test]
    fn bind_autorelease_follows_the_policy() {
        use crate::netlink::ctrl::{PolicyAttr, NL_ATTR_TYPE_U32, NL_ATTR_TYPE_U8};
        let pol = |a: &[(u16, u32)]| -> Vec<PolicyAttr> {
            a.iter()
                .map(|&(kind, t)| PolicyAttr {
                    kind,
                    nl_type: Some(t),
                })
                .collect()
        };
        let nest = 13; // NL_ATTR_TYPE_NESTED
        let base = pol(&[(1, NL_ATTR_TYPE_U32), (2, nest), (3, NL_ATTR_TYPE_U32)]);
        let rx_page_size = pol(&[
            (1, NL_ATTR_TYPE_U32),
            (2, nest),
            (3, NL_ATTR_TYPE_U32),
            (5, NL_ATTR_TYPE_U32),
        ]);
        let series = pol(&[
            (1, NL_ATTR_TYPE_U32),
            (2, nest),
            (3, NL_ATTR_TYPE_U32),
            (5, NL_ATTR_TYPE_U8),
        ]);
        let rebased = pol(&[
            (1, NL_ATTR_TYPE_U32),
            (2, nest),
            (3, NL_ATTR_TYPE_U32),
            (5, NL_ATTR_TYPE_U32),
            (6, NL_ATTR_TYPE_U8),
        ]);
        for want in [false, true] {
            assert_eq!(bind_autorelease(want, &series), Ok(Some((5, want))));
            assert_eq!(bind_autorelease(want, &rebased), Ok(Some((6, want))));
        }
        for p in [&base, &rx_page_size] {
            assert_eq!(bind_autorelease(false, p), Ok(None));
        }
        let skip = bind_autorelease(true, &rx_page_size).unwrap_err();
        assert_eq!(
            skip,
            Missing::AutoreleaseAttr {
                policy: vec![1, 2, 3, 5]
            }
        );
        assert!(skip.to_string().starts_with(
            "-a 1: this kernel's bind-rx has no autorelease attribute (policy attributes [1, 2, \
             3, 5]"
        ));
    }

    fn nl(errno: i32, msg: Option<&str>) -> Error {
        Error::Netlink(Box::new(NlError {
            ext_msg: msg.map(str::to_string),
            ..NlError::refusal("netdev", "bind-rx", "", errno)
        }))
    }

    fn skip_text(e: Error) -> String {
        match e {
            Error::Skip(m) => m.to_string(),
            other => panic!("not a skip: {other}"),
        }
    }

    /// The sentences of the skips the kernel's harness and our tests match, byte for byte.
    #[test]
    fn sentences_are_kept() {
        let op = Op::Nic {
            ifname: "eth0",
            what: "header split (tcp-data-split)",
            hint: None,
        };
        assert_eq!(
            skip_text(classify(Error::sys("RINGS_SET", libc::EOPNOTSUPP), op)),
            "eth0: driver does not support header split (tcp-data-split): RINGS_SET: \
             EOPNOTSUPP (Operation not supported)"
        );
        assert_eq!(
            skip_text(classify(Error::sys("RINGS_SET", libc::EPERM), op)),
            "eth0: header split (tcp-data-split) needs CAP_NET_ADMIN: RINGS_SET: EPERM \
             (Operation not permitted)"
        );
        let bind = Op::BindRx {
            rx_page_size: Some(16384),
            autorelease: false,
        };
        let e = classify(nl(libc::EINVAL, Some("Unknown attribute type")), bind);
        assert!(
            skip_text(e).contains("does not know bind-rx attribute rx-page-size"),
            "unknown attribute"
        );
        let e = classify(nl(libc::EOPNOTSUPP, None), bind);
        assert!(skip_text(e).contains("with rx-page-size 16384"));
        let e = classify(nl(libc::EINVAL, Some("tcp-data-split is disabled")), bind);
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);
        assert_eq!(
            Missing::InZcrx(Box::new(Missing::Hugepages {
                needed: 16,
                pool: None,
                waited: None
            }))
            .to_string(),
            "io_uring zcrx: need 16 free 2 MiB hugepages, have fewer; raise vm.nr_hugepages"
        );
        assert_eq!(
            Missing::InZcrx(Box::new(Missing::RecvZc { opcode: 58 })).to_string(),
            Missing::RecvZc { opcode: 58 }.to_string(),
            "a sentence naming zcrx is not prefixed twice"
        );
    }

    /// A dma-buf heap's refusals: which `open` errno is which skip (no heaps at all, no heap
    /// of that name, no access), the allocation's `ENOMEM`, any mmap refusal; every other
    /// answer stays a failure.
    #[test]
    fn dma_heap_refusals_are_sorted() {
        use std::path::Path;
        let path = Path::new("/dev/dma_heap/system");
        let dir = Path::new("/dev/dma_heap");
        let heaps = ["reserved".to_string()];
        let open = |dir_exists, heaps| Op::DmaHeapOpen {
            name: "system",
            path,
            dir,
            heaps,
            dir_exists,
        };
        let refused = |errno| Error::sys("open(/dev/dma_heap/system)", errno);
        let e = classify(refused(libc::ENOENT), open(false, None));
        assert!(
            matches!(&e, Error::Skip(Missing::DmaHeaps { errno, .. }) if *errno == libc::ENOENT),
            "{e}"
        );
        let e = classify(refused(libc::ENODEV), open(true, Some(&heaps)));
        assert_eq!(
            skip_text(e),
            "no dma-buf heap named \"system\": cannot open /dev/dma_heap/system (ENODEV (No \
             such device)); this host's heaps: reserved"
        );
        let e = classify(refused(libc::ENOENT), open(true, None));
        assert!(
            skip_text(e).ends_with("this host's heaps: (could not be listed)"),
            "an unreadable directory"
        );
        let e = classify(refused(libc::EACCES), open(true, Some(&heaps)));
        assert_eq!(
            skip_text(e),
            "cannot open /dev/dma_heap/system (EACCES (Permission denied)): needs root or read \
             access to the heap"
        );
        let e = classify(refused(libc::EMFILE), open(true, Some(&heaps)));
        assert!(
            matches!(e, Error::Sys { errno, .. } if errno == libc::EMFILE),
            "{e}"
        );

        let alloc = Op::DmaHeapAlloc {
            name: "system",
            size_bytes: 1 << 20,
        };
        let e = classify(Error::sys("ioctl", libc::ENOMEM), alloc);
        assert!(
            matches!(e, Error::Skip(Missing::DmaHeapMemory { .. })),
            "{e}"
        );
        let e = classify(Error::sys("ioctl", libc::EINVAL), alloc);
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);

        let map = Op::DmaHeapMap {
            name: "system",
            size_bytes: 1 << 20,
        };
        let e = classify(Error::sys("mmap", libc::ENODEV), map);
        assert_eq!(
            skip_text(e),
            "dma-heap system dma-buf of 1048576 bytes cannot be mapped for validation: mmap: \
             ENODEV (No such device)"
        );

        let bind = Op::DmaHeapBind {
            name: "system",
            rx_page_size: Some(16384),
        };
        let e = classify(
            nl(
                libc::EINVAL,
                Some("dmabuf sg entry (addr=0x0, len=4096) not aligned to niov size 16"),
            ),
            bind,
        );
        assert!(
            matches!(e, Error::Skip(Missing::DmaHeapUnaligned { .. })),
            "{e}"
        );
        let e = classify(nl(libc::EINVAL, Some("tcp-data-split is disabled")), bind);
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);
        let e = classify(nl(libc::EBUSY, None), bind);
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);
    }

    /// Several blockers are named in order on one line; one is itself; none is none.
    #[test]
    fn several_blockers_are_named_in_order() {
        let driver = Missing::NoQueueOps {
            ifname: "veth0".into(),
            answer: "EOPNOTSUPP (Operation not supported); at NETDEV_A_DMABUF_IFINDEX".into(),
        };
        let udmabuf = Missing::Udmabuf {
            dev: "/dev/udmabuf".into(),
            errno: libc::ENOENT,
        };
        assert_eq!(Missing::all(vec![]), None);
        assert_eq!(Missing::all(vec![udmabuf.clone()]), Some(udmabuf.clone()));
        let both = Missing::all(vec![driver.clone(), udmabuf.clone()]).unwrap();
        assert_eq!(
            both.to_string(),
            format!("{driver}; and: {udmabuf}"),
            "in the order given"
        );
        assert!(both.to_string().starts_with(
            "veth0: the driver has no queue management ops (bind-rx answered EOPNOTSUPP \
             (Operation not supported); at NETDEV_A_DMABUF_IFINDEX); "
        ));
        let nested = Missing::all(vec![both.clone(), Missing::ChannelConfig]).unwrap();
        assert_eq!(
            nested,
            Missing::Several(vec![driver, udmabuf, Missing::ChannelConfig])
        );
    }

    /// Answers that are no missing capability stay what they were.
    #[test]
    fn failures_stay_failures() {
        let e = classify(
            Error::sys("bind", libc::EINVAL),
            Op::BindTx { ifname: "eth0" },
        );
        assert!(matches!(e, Error::Sys { errno, .. } if errno == libc::EINVAL));
        let e = classify(
            Error::sys("x", libc::EBUSY),
            Op::BindRx {
                rx_page_size: None,
                autorelease: false,
            },
        );
        assert_eq!(e.exit_code(), crate::error::EXIT_FAIL);
    }
}
