//! [`uapi_struct!`]: a `#[repr(C)]` ioctl struct declared as one `field: type = offset` list,
//! from which its compile-time layout asserts (size and every offset) and its native-endian
//! byte codec are generated, so the bytes the tests compare follow the asserted layout.
//!
//! Used by every struct this tool passes to the kernel or reads from it, each with a
//! byte-exact test: the `SIOCETHTOOL` structs (`sys/ethtool_ioctl.rs`), `struct
//! dma_heap_allocation_data` (`sys/dma_heap.rs`) and, in `sys/uapi.rs`, the devmem cmsg and
//! token structs, `sock_extended_err`, `udmabuf_create`, `dma_buf_sync` and the io_uring zcrx
//! registration structs.

use crate::error::{Error, Result};

/// One field of a `#[repr(C)]` ioctl struct as native-endian bytes: `put` writes it at the
/// start of `out` (a zeroed buffer, so padding stays zero), `get` reads it from the start of
/// `b`. Callers slice at the field's asserted offset and check lengths first.
pub(crate) trait Wire: Sized {
    /// Bytes the field occupies.
    const LEN: usize;
    fn put(&self, out: &mut [u8]);
    fn get(b: &[u8]) -> Self;
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            const LEN: usize = ::std::mem::size_of::<$t>();
            fn put(&self, out: &mut [u8]) {
                out[..Self::LEN].copy_from_slice(&self.to_ne_bytes());
            }
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; ::std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::LEN]);
                <$t>::from_ne_bytes(a)
            }
        }
    )*};
}
wire_int!(u8, u16, u32, u64);

impl<T: Wire, const N: usize> Wire for [T; N] {
    const LEN: usize = N * T::LEN;
    fn put(&self, out: &mut [u8]) {
        for (i, v) in self.iter().enumerate() {
            v.put(&mut out[i * T::LEN..]);
        }
    }
    fn get(b: &[u8]) -> Self {
        std::array::from_fn(|i| T::get(&b[i * T::LEN..]))
    }
}

/// Declares a `#[repr(C)]` uapi struct from one list of `field: type = offset`: the struct,
/// compile-time asserts of its size and every offset, its [`Wire`] codec, and the public
/// `to_bytes` / `from_bytes` (Error::Decode "struct NAME" for a short buffer).
macro_rules! uapi_struct {
    ($(#[$m:meta])* $name:ident = $size:literal {
        $($(#[$fm:meta])* $f:ident: $t:ty = $off:literal,)*
    }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
        }
        const _: () = assert!(::std::mem::size_of::<$name>() == $size);
        $(const _: () = assert!(::std::mem::offset_of!($name, $f) == $off);)*

        impl $crate::sys::uapi_struct::Wire for $name {
            const LEN: usize = $size;
            fn put(&self, out: &mut [u8]) {
                $($crate::sys::uapi_struct::Wire::put(&self.$f, &mut out[$off..]);)*
            }
            fn get(b: &[u8]) -> Self {
                $name { $($f: $crate::sys::uapi_struct::Wire::get(&b[$off..]),)* }
            }
        }

        impl $name {
            /// The struct's bytes as the kernel reads them (padding zero).
            pub fn to_bytes(&self) -> [u8; $size] {
                let mut b = [0u8; $size];
                $crate::sys::uapi_struct::Wire::put(self, &mut b);
                b
            }

            /// Reads the struct back from what the kernel wrote.
            ///
            /// Errors: `Error::Decode` for a buffer shorter than the struct.
            pub fn from_bytes(b: &[u8]) -> $crate::error::Result<Self> {
                $crate::sys::uapi_struct::need(concat!("struct ", stringify!($name)), b, $size)?;
                Ok(<Self as $crate::sys::uapi_struct::Wire>::get(b))
            }
        }
    };
}
pub(crate) use uapi_struct;

/// `Error::Decode` naming `what` when `b` holds fewer than `len` bytes.
pub(crate) fn need(what: &str, b: &[u8], len: usize) -> Result<()> {
    if b.len() < len {
        return Err(Error::decode(
            what,
            format!("{} bytes, need at least {len}", b.len()),
        ));
    }
    Ok(())
}
