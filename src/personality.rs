//! Other command-line personalities of the binary, chosen by the file name it is invoked under
//! (`argv[0]`, as a symlink names it): `iou-zcrx` runs [`iou_zcrx`], the kernel's io_uring
//! zero-copy receive selftest's command line, on this crate's zcrx receive and pattern sender.
//! Any other name is `ncdevmem-rs` itself.

use std::ffi::OsStr;
use std::path::Path;

pub mod iou_zcrx;

/// Which command line `argv[0]` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Personality {
    /// `ncdevmem-rs` ([`crate::cli`]).
    Ncdevmem,
    /// `iou-zcrx` ([`iou_zcrx`]).
    IouZcrx,
}

/// The personality of a process invoked as `argv0` (its file name decides; `None`, an empty
/// or unknown name is [`Personality::Ncdevmem`]).
pub fn from_argv0(argv0: Option<&OsStr>) -> Personality {
    match argv0.and_then(|a| Path::new(a).file_name()) {
        Some(name) if name == iou_zcrx::NAME => Personality::IouZcrx,
        _ => Personality::Ncdevmem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_name_of_argv0_decides() {
        let p = |s: &str| from_argv0(Some(OsStr::new(s)));
        assert_eq!(p("iou-zcrx"), Personality::IouZcrx);
        assert_eq!(
            p("/opt/kselftest/drivers/net/hw/iou-zcrx"),
            Personality::IouZcrx
        );
        assert_eq!(p("./iou-zcrx"), Personality::IouZcrx);
        assert_eq!(p("ncdevmem-rs"), Personality::Ncdevmem);
        assert_eq!(p("/usr/bin/ncdevmem"), Personality::Ncdevmem);
        assert_eq!(p("iou-zcrx.py"), Personality::Ncdevmem);
        assert_eq!(p("/iou-zcrx/ncdevmem-rs"), Personality::Ncdevmem);
        assert_eq!(p(""), Personality::Ncdevmem);
        assert_eq!(from_argv0(None), Personality::Ncdevmem);
    }
}
