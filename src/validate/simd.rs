//! The validator's per-word loops, compiled for several instruction sets, and the choice among
//! them.
//!
//! Each loop is written once, as portable Rust the compiler vectorizes, and instantiated per
//! [`Isa`]: on x86_64 for AVX-512 (`avx512f`, `avx512dq`, `avx512vl`, `avx512bw`), for AVX2
//! and for the crate's baseline (x86-64: SSE2); elsewhere (aarch64, whose baseline has NEON)
//! only the baseline build exists. The fastest one the CPU has is picked at the first call;
//! [`force_isa`] makes every later call use another one (benchmarks compare them in one
//! process; the tests run each one against the portable definition).

use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::{Error, Result};

/// An instruction set the validator's loops are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// x86_64 with AVX-512 (F, DQ, VL, BW): 64-byte vectors.
    Avx512,
    /// x86_64 with AVX2: 32-byte vectors.
    Avx2,
    /// The crate's compile target without extra features: SSE2 on x86_64 (16-byte vectors),
    /// NEON on aarch64.
    Baseline,
}

impl Isa {
    /// Every build, fastest first (only [`Isa::Baseline`] off x86_64).
    pub const ALL: &'static [Isa] = if cfg!(target_arch = "x86_64") {
        &[Isa::Avx512, Isa::Avx2, Isa::Baseline]
    } else {
        &[Isa::Baseline]
    };

    /// `avx512`, `avx2`, `baseline`: how benchmarks and messages name it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Baseline => "baseline",
        }
    }

    /// Whether this CPU runs the build (the baseline always).
    pub fn supported(self) -> bool {
        match self {
            Isa::Baseline => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest build this CPU runs.
    pub fn detected() -> Isa {
        Isa::ALL
            .iter()
            .copied()
            .find(|i| i.supported())
            .unwrap_or(Isa::Baseline)
    }

    fn code(self) -> u8 {
        match self {
            Isa::Avx512 => 1,
            Isa::Avx2 => 2,
            Isa::Baseline => 3,
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The build in use: 0 until the first call picks one.
static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// The build the validator's loops run (picked at the first call: [`Isa::detected`], unless
/// [`force_isa`] chose another).
#[inline]
pub fn active_isa() -> Isa {
    match ACTIVE.load(Ordering::Relaxed) {
        1 => Isa::Avx512,
        2 => Isa::Avx2,
        3 => Isa::Baseline,
        _ => {
            let isa = Isa::detected();
            ACTIVE.store(isa.code(), Ordering::Relaxed);
            isa
        }
    }
}

/// Makes every later check and fill of this process run `isa`'s build (`None`: the fastest
/// the CPU has again). For benchmarks, which compare the builds in one run; the result of
/// every build is the same.
///
/// # Errors
/// [`Error::Usage`] when this CPU cannot run `isa`'s build (nothing changes then).
pub fn force_isa(isa: Option<Isa>) -> Result<()> {
    let isa = isa.unwrap_or_else(Isa::detected);
    if !isa.supported() {
        return Err(Error::Usage(format!(
            "this CPU cannot run the {isa} build of the validator"
        )));
    }
    ACTIVE.store(isa.code(), Ordering::Relaxed);
    Ok(())
}

/// Defines `$name(args) -> ret`, which runs `$body` (an `#[inline(always)]` function of the
/// same arguments) in the build [`active_isa`] names; `$name_in(isa, args)`, the same in a given
/// build (the baseline's when this CPU cannot run `isa`'s); and the module `$builds` that holds
/// the builds. With `; avx512 = $avx512, avx2 = $avx2` those builds run these instead
/// (`#[inline(always)] unsafe fn`s of the same arguments whose one condition is that the CPU
/// has AVX2: code written with intrinsics, where the portable body vectorizes worse).
macro_rules! dispatched {
    (@pick $first:ident $($rest:ident)?) => { $first };
    ($(#[$m:meta])* $vis:vis fn $name:ident / $name_in:ident / $builds:ident = $body:ident ($($a:ident: $t:ty),*) $(-> $r:ty)? $(; avx512 = $avx512:ident, avx2 = $avx2:ident)?) => {
        mod $builds {
            #[allow(unused_imports)]
            use super::*;
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw,avx2")]
            #[allow(unused_unsafe)]
            pub(super) unsafe fn avx512($($a: $t),*) $(-> $r)? {
                // SAFETY: the body asks only for AVX2, which this build's caller guarantees.
                unsafe { $crate::validate::simd::dispatched!(@pick $($avx512)? $body)($($a),*) }
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            #[allow(unused_unsafe)]
            pub(super) unsafe fn avx2($($a: $t),*) $(-> $r)? {
                // SAFETY: the body asks only for AVX2, which this build's caller guarantees.
                unsafe { $crate::validate::simd::dispatched!(@pick $($avx2)? $body)($($a),*) }
            }
            /// Not inlined, so the dispatcher stays a few instructions.
            #[inline(never)]
            pub(super) fn baseline($($a: $t),*) $(-> $r)? { $body($($a),*) }
        }

        $(#[$m])*
        #[inline]
        $vis fn $name($($a: $t),*) $(-> $r)? {
            match $crate::validate::simd::active_isa() {
                // SAFETY: `active_isa` names a build only when the CPU has its features
                // (detected, or forced after `Isa::supported`).
                #[cfg(target_arch = "x86_64")]
                $crate::validate::simd::Isa::Avx512 => unsafe { $builds::avx512($($a),*) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                $crate::validate::simd::Isa::Avx2 => unsafe { $builds::avx2($($a),*) },
                _ => $builds::baseline($($a),*),
            }
        }

        /// As the function without `_in`, in the build `isa` (the baseline's when this CPU
        /// cannot run `isa`'s).
        #[allow(dead_code)]
        $vis fn $name_in(isa: $crate::validate::simd::Isa, $($a: $t),*) $(-> $r)? {
            match isa {
                // SAFETY: the CPU has the features: checked right here.
                #[cfg(target_arch = "x86_64")]
                $crate::validate::simd::Isa::Avx512 if isa.supported() => unsafe { $builds::avx512($($a),*) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                $crate::validate::simd::Isa::Avx2 if isa.supported() => unsafe { $builds::avx2($($a),*) },
                _ => $builds::baseline($($a),*),
            }
        }
    };
}
pub(crate) use dispatched;
